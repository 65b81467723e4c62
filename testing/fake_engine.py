"""FAKE ENGINE: a fast stand-in for a vLLM OpenAI server, for load, overhead and fault tests of the
gateway itself.  It is not a model: it answers fixed tokens.

A raw asyncio HTTP/1.1 server (keep-alive, Content-Length bodies) so that it costs little CPU:
- ``POST /v1/chat/completions`` and ``/v1/completions``: ``max_tokens`` tokens
  (default --tokens);
  with ``"stream": true`` an OpenAI SSE stream, each event its own write, ``--delay-ms`` apart (with
  ``stream_options.include_usage`` a usage event last, prompt 8 tokens).
- ``POST /v1/embeddings``: a small vector.
- The rest of vLLM's data plane (testing/fake_apis.py): ``/v1/responses`` (stored in memory; GET and
  cancel by id; ``previous_response_id`` unknown here: 404, as a vLLM replica that lacks it),
  ``/v1/messages`` (Anthropic, streamed too), ``/v1/messages/count_tokens``, rerank, score,
  ``/pooling``, ``/classify``, ``/tokenize``, ``/detokenize``, ``/v1/audio/*`` (multipart), and
  ``/v1/load_lora_adapter`` / ``/v1/unload_lora_adapter`` (refused with ``--no-lora``).
- ``GET /health``, ``/v1/models``, ``/metrics`` (vLLM's gauge names; with ``--kv-blocks`` also
  ``vllm:cache_config_info`` with that many 16-token blocks), ``/stats`` (peak in-flight).
- ``--prefix-cache-blocks N``: a model of vLLM's prefix cache per engine (testing/fake_prefix_cache.py),
  reported in ``/metrics`` as vLLM's ``prefix_cache_queries|hits_total``; each prefilled (missed) block
  waits ``--prefill-ms-per-block`` before the first token.
- ``--ports N`` serves N independent engines (own stats each) on ``--port`` .. ``--port + N - 1`` from one
  process, for simulations with many replicas.
Faults, per request (header ``x-fake-fault``) or for every request (``--fault``):
``400`` (a client error), ``500`` (answer 500), ``hang`` (never answer),
``die-after-N`` (close the connection after N chunks), ``die-mid-N`` (after N chunks, half an event,
then close), ``stall-after-N`` (after N chunks, nothing more; a non-streamed answer: after N tokens'
time the connection closes or stays silent), ``slow-first-MS`` (wait before the first byte),
``slow-500-MS`` (wait, then answer 500), ``503`` and ``slow-503-MS`` (refuse, as a draining or
overloaded vLLM does); ``--fault metrics-500``: ``/metrics`` answers 500. ``--crash-on TEXT``: an engine
that crashes on one given prompt: a POST whose body holds TEXT is read, counted as a generation, and its
connection closed with no answer (the engine serves every other request). ``/stats`` counts generations
started and served, and ``generations`` counts them by request id (``X-Request-Id``), every API.
A stream that asks ``return_token_ids`` (or a completion whose prompt is token ids) gets vLLM's frames
with token ids, deterministic so that a continuation equals an undisturbed run (testing/fake_tokens.py;
``--multibyte``: tokens that end inside UTF-8 characters); its faults count token frames and add
``error-after-N`` (vLLM's in-stream error frame), ``garbage-after-N`` (a frame that is not JSON) and
``busy-after-N-MS`` (no token for MS ms while the engine's own counters advance: other clients' prefill).
``/metrics`` counts ``vllm:generation_tokens_total`` and ``vllm:prompt_tokens_total`` as vLLM does (they
stop with a stalled engine); ``GET /fault/health-delay?ms=N`` makes every ``/health`` answer N ms late.
With ``--api-key`` it guards ``/v1/*`` as vLLM's ``--api-key`` does (401 without ``Authorization: Bearer``);
``/stats`` reports the Authorization header of the last GET (health, metrics) it saw.
``--enable-log-requests`` (vLLM's flag): ``Received request <X-Request-Id>`` on stderr per generation, on
every API that runs the model (chat, completions, embeddings, Responses, Messages, rerank, score, pooling,
classify), so that a fault suite counts each request's generations by id (bench/faults/checks.py).
For the fault suite (bench/faults), each its own option: ``--exit-on-prompt TEXT`` (a request whose body
holds TEXT is logged as received, then the whole process exits 1: a replica that crashes on one given
prompt after it began it; ``--crash-on`` closes only the connection), ``--idle-close-ms N`` (a keep-alive
connection idle for N ms is closed, as uvicorn's keep-alive timeout does: the next request on it finds it
closed before it was written), ``GET /fault/idle-close?ms=N`` (the same at run time),
``GET /fault/latency?ms=N`` (``--latency-ms`` at run time: a busy replica), ``GET /fault/delay?ms=N``
(``--delay-ms`` of streams at run time) and ``GET /fault/event-bytes?n=N`` (their tokens' text padded
to N bytes): with both, a long fast stream. A generation whose connection closes
before its end logs ``Aborted request <id>`` (vLLM's line, with ``--enable-log-requests``).
Sleep mode's calls take ``--sleep1-s``, ``--sleep2-s``, ``--wake1-s``, ``--wake-weights-s``, ``--reload-s``,
``--wake-kv-s`` each (testing/fake_sleep.py; a measured card's through testing/fake_gpu_engine.py's
``--profile``). A slow start as vLLM's (supervisor-death tests): ``--start-delay-s`` waits before listening;
``--engine-core`` forks a child in the engine's process group that lives until killed, as vLLM's engine
core (which holds the GPU memory) outlives an API server killed alone.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import uvloop

from testing.fake_apis import FakeApis, bad_request, error
from testing.fake_prefix_cache import PrefixCache, prompt_text
from testing.fake_sleep import FakeSleep, SleepConfig, SleepWaits
from testing.fake_tokens import MAX_STREAM_TOKENS, TokenFrames, error_frame


@dataclass
class Stats:
    inflight: int = 0
    """Generations in the engine: vLLM's ``num_requests_running``."""
    held: int = 0
    """Generation requests the API server holds, taken by the engine or not yet (``--preprocess-ms``):
    vLLM's ``/load`` ``server_load`` (with ``--enable-server-load-tracking``)."""
    peak: int = 0
    started: int = 0
    served: int = 0
    last_headers: dict[str, str] = field(default_factory=dict)
    last_body: str = ""
    get_authorization: str = ""
    generations: collections.Counter[str] = field(default_factory=collections.Counter)
    health_delay_s: float = 0.0
    """``GET /fault/health-delay?ms=N``: every ``/health`` answers N ms late from then on (0: at once)."""
    generated: int = 0
    """Tokens written, vLLM's ``vllm:generation_tokens_total``."""
    prompted: int = 0
    """Prompt tokens taken, vLLM's ``vllm:prompt_tokens_total`` (8 a generation; a ``busy`` fault adds
    other clients' prefill while it lasts)."""

    def count(self, rid: str) -> None:
        """One generation begun, under its request id."""
        self.started += 1
        self.generations[rid] += 1

    def enter(self, rid: str) -> None:
        self.count(rid)
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)

    def leave(self) -> None:
        self.inflight -= 1
        self.served += 1


@dataclass(frozen=True)
class Config:
    model: str = "fake-model"
    tokens: int = 16
    delay_ms: float = 0.0
    fault: str = ""
    latency_ms: float = 0.0
    kv_blocks: int = 0
    lora: bool = True
    api_key: str = ""
    sleep: SleepConfig = field(default_factory=SleepConfig)
    prefix_cache_blocks: int = 0
    prefill_ms_per_block: float = 0.0
    multibyte: bool = False
    max_model_len: int = 2048
    log_requests: bool = False  # vLLM's --enable-log-requests: "Received request <id>" per generation
    split_tail: bool = False  # the usage event and [DONE] each their own write, --delay-ms apart
    crash_on: str = ""  # a POST whose body holds this text: counted, then the connection closes unanswered
    faults: FaultConfig = field(default_factory=lambda: FaultConfig())
    preprocess_ms: float = 0.0  # a generation request waits this long before the engine counts it


def http_head(status: int, ctype: str, length: int | None) -> bytes:
    reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error", 400: "Bad Request"}.get(status, "OK")
    size = f"content-length: {length}\r\n" if length is not None else "transfer-encoding: chunked\r\n"
    return f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\n{size}\r\n".encode()


def chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def completion_body(cfg: Config, chat: bool, n: int, rid: str) -> bytes:
    text = "".join(f"tok{i} " for i in range(n))  # what the same request streams
    choice = {"index": 0, "finish_reason": "length"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    return json.dumps(
        {
            "id": rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": cfg.model,
            "choices": [choice],
            "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n},
        }
    ).encode()


def usage_event(cfg: Config, chat: bool, n: int, rid: str) -> bytes:
    """The last event for ``stream_options.include_usage``: no choices, the usage (vLLM's compact JSON)."""
    obj = "chat.completion.chunk" if chat else "text_completion"
    usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
    payload = {"id": rid, "object": obj, "created": 0, "model": cfg.model, "choices": [], "usage": usage}
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def stream_event(cfg: Config, chat: bool, i: int, rid: str) -> bytes:
    return event_template(cfg, chat, rid) % json.dumps(f"tok{i} ").encode()


def event_template(cfg: Config, chat: bool, rid: str) -> bytes:
    """A plain stream's event, its text as ``%b`` (what json.dumps of the frame writes, built once a
    stream: token-id frames are built as cheaply, testing/fake_tokens.py)."""
    if chat:
        choice = {"index": 0, "delta": {"content": "\0"}, "finish_reason": None}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": "\0", "finish_reason": None}
        obj = "text_completion"
    payload = {"id": rid, "object": obj, "created": 0, "model": cfg.model, "choices": [choice]}
    return b"data: " + json.dumps(payload).replace("%", "%%").replace('"\\u0000"', "%b").encode() + b"\n\n"


@dataclass(frozen=True)
class FaultConfig:
    """The fault suite's options (bench/faults): a prompt that ends the process once received, and the
    idle time after which a keep-alive connection is closed (0: never)."""

    exit_on_prompt: str = ""
    idle_close_ms: float = 0.0


@dataclass
class Knobs:
    """What the fault suite changes at run time, per engine: after how long an idle keep-alive connection
    is closed (0: ``--idle-close-ms``), and how long a generation waits once received before it answers
    (as ``--latency-ms``: a busy replica)."""

    idle_close_ms: float = 0.0
    latency_ms: float = 0.0
    delay_ms: float = 0.0
    """The gap between a stream's events (as ``--delay-ms``; 0: the start flag's)."""
    event_bytes: float = 0.0
    """A stream's token text padded to this many bytes (0: none): many bytes a second."""


KNOBS = {"/fault/idle-close?ms=": "idle_close_ms", "/fault/latency?ms=": "latency_ms",
         "/fault/delay?ms=": "delay_ms", "/fault/event-bytes?n=": "event_bytes"}  # fmt: skip
GENERATING = frozenset({"/v1/responses", "/v1/messages", "/v1/rerank", "/v1/score", "/rerank", "/score",
                        "/v2/rerank", "/pooling", "/classify"})  # fmt: skip


def log_generation(cfg: Config, path: str, headers: dict[str, str]) -> None:
    """``Received request <id>`` for a request to an API that runs the model (with --enable-log-requests):
    chat, completions and embeddings log in :meth:`FakeEngine.generate`, the others here."""
    if cfg.log_requests and path in GENERATING:
        print(f"Received request {headers.get('x-request-id', 'fake')}", file=sys.stderr, flush=True)


def exit_on_prompt(cfg: FaultConfig, body: bytes) -> None:
    """With ``--exit-on-prompt TEXT``, a request (received and logged) whose body holds TEXT ends the
    process at once, as a crash does."""
    if cfg.exit_on_prompt and cfg.exit_on_prompt.encode() in body:
        os._exit(1)


def set_knob(knobs: Knobs, path: str) -> tuple[int, bytes] | None:
    """``GET /fault/idle-close?ms=N``: keep-alive connections idle N ms are closed (0: the start flag's);
    ``GET /fault/latency?ms=N``: each generation waits N ms once received; ``GET /fault/delay?ms=N``: a
    stream's events N ms apart; ``GET /fault/event-bytes?n=N``: each its text padded to N bytes. None: not
    a knob's path."""
    prefix, _, value = path.partition("=")
    name = KNOBS.get(prefix + "=")
    if name is None:
        return None
    try:
        setattr(knobs, name, float(value))
    except ValueError:
        return 400, b'{"error":"not a number"}'
    return 200, b"{}"


class FakeEngine(asyncio.Protocol):
    def __init__(
        self,
        cfg: Config,
        stats: Stats,
        apis: FakeApis,
        sleep: FakeSleep | None = None,
        cache: PrefixCache | None = None,
        knobs: Knobs | None = None,
    ) -> None:
        self.cfg, self.stats, self.apis, self.cache = cfg, stats, apis, cache
        self.knobs = knobs or Knobs()
        self.sleep = sleep or FakeSleep(SleepConfig())
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.queue: asyncio.Queue[tuple[str, str, dict[str, str], bytes]] = asyncio.Queue()
        self.worker: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.worker = asyncio.get_running_loop().create_task(self.serve())

    def connection_lost(self, exc: Exception | None) -> None:
        if self.worker:
            self.worker.cancel()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").split("\r\n")
            method, path, _ = head[0].split(" ", 2)
            headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
            length = int(headers.get("content-length", "0"))
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            self.queue.put_nowait((method, path, headers, body))

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    async def next_request(self) -> tuple[str, str, dict[str, str], bytes] | None:
        """The next request on this connection; None when ``--idle-close-ms`` passed without one."""
        idle_ms = self.knobs.idle_close_ms or self.cfg.faults.idle_close_ms
        if not idle_ms:
            return await self.queue.get()
        try:
            return await asyncio.wait_for(self.queue.get(), idle_ms / 1000)
        except TimeoutError:
            return None

    async def serve(self) -> None:
        while True:
            got = await self.next_request()
            if got is None:  # idle past --idle-close-ms: closed, as uvicorn's keep-alive timeout does
                assert self.transport is not None
                self.transport.close()
                return
            method, path, headers, body = got
            if not await self.handle(method, path, headers, body):
                assert self.transport is not None
                self.transport.close()
                return

    def send(self, status: int, body: bytes, ctype: str = "application/json") -> bool:
        self.write(http_head(status, ctype, len(body)) + body)
        return True

    def authorized(self, path: str, headers: dict[str, str]) -> bool:
        """vLLM's rule: with an API key, every /v1 path needs it as a Bearer token."""
        if not self.cfg.api_key or not path.startswith("/v1"):
            return True
        return headers.get("authorization", "") == f"Bearer {self.cfg.api_key}"

    async def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> bool:
        if not self.authorized(path, headers):
            return self.send(401, b'{"error":"Unauthorized"}')
        if method == "GET" and (answer := set_knob(self.knobs, path)) is not None:
            return self.send(*answer)
        if self.sleep.handles(path):
            if wait := self.sleep.wait_s(path, body):
                await asyncio.sleep(wait)
            return self.send(*self.sleep.handle(method, path, body))
        if method == "POST" and self.cfg.crash_on and self.cfg.crash_on.encode() in body:
            self.stats.count(headers.get("x-request-id", "fake"))  # it began the generation, then crashed
            if self.cfg.log_requests:
                print(f"Received request {headers.get('x-request-id', 'fake')}", file=sys.stderr, flush=True)
            return False
        if method == "GET":
            if path == "/health" and self.stats.health_delay_s:
                await asyncio.sleep(self.stats.health_delay_s)
            if not path.startswith(("/stats", "/fault/")):
                self.stats.get_authorization = headers.get("authorization", "")
            return self.get(path)
        if path not in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
            return await self.other(path, headers, body)
        if why := self.sleep.serving_error():
            return self.send(500, json.dumps(error(why, "server_error", 500)).encode())
        self.stats.held += 1
        try:
            await asyncio.sleep(self.cfg.preprocess_ms / 1000)  # tokenizing, the chat template
            return await self.generation(path, headers, body)
        finally:
            self.stats.held -= 1

    async def generation(self, path: str, headers: dict[str, str], body: bytes) -> bool:
        """One generation in the engine (counted in ``/metrics`` while it runs)."""
        self.stats.enter(headers.get("x-request-id", "fake"))
        self.stats.last_headers, self.stats.last_body = headers, body.decode("utf-8", "replace")
        try:
            return await self.generate(path, headers, body)
        except asyncio.CancelledError:  # the connection closed before the end (vLLM aborts the request)
            if self.cfg.log_requests:
                print(f"Aborted request {headers.get('x-request-id', 'fake')}", file=sys.stderr, flush=True)
            raise
        finally:
            self.stats.leave()

    async def other(self, path: str, headers: dict[str, str], body: bytes) -> bool:
        """Every other POST: LoRA load/unload, audio (multipart), and the JSON APIs of fake_apis."""
        if path == "/v1/load_lora_adapter":
            return self.send(*self.apis.load_lora(json.loads(body or b"{}")))
        if path == "/v1/unload_lora_adapter":
            return self.send(*self.apis.unload_lora(json.loads(body or b"{}")))
        self.stats.enter(headers.get("x-request-id", "fake"))
        self.stats.last_headers, self.stats.last_body = headers, body.decode("utf-8", "replace")
        log_generation(self.cfg, path, headers)
        exit_on_prompt(self.cfg.faults, body)
        try:
            return await self.answer(path, headers, body)
        finally:
            self.stats.leave()

    async def answer(self, path: str, headers: dict[str, str], body: bytes) -> bool:
        if headers.get("x-fake-fault", self.cfg.fault) == "500":
            return self.send(500, json.dumps(error("fake engine failure", "server_error", 500)).encode())
        if path.startswith("/v1/audio/"):
            ok = headers.get("content-type", "").startswith("multipart/form-data") and b'name="file"' in body
            return self.send(200, b'{"text":"fake transcript"}') if ok else self.send(*bad_request("no file"))
        try:
            req = json.loads(body or b"{}")
            asked = int(req.get("max_tokens") or req.get("max_output_tokens") or self.cfg.tokens)
            n = max(0, min(asked, MAX_STREAM_TOKENS))  # a fuzzed 10**12 or -5 (max_tokens on /v1/responses,
            return await self.json_api(path, req, n)  # a field the gateway does not check there): bounded
        except (ValueError, TypeError, AttributeError) as exc:
            return self.send(
                400,
                json.dumps(error(f"bad request: {exc}", "BadRequestError", 400)).encode(),
            )

    async def json_api(self, path: str, req: dict[str, Any], n: int) -> bool:
        if path == "/v1/responses":
            return await self.respond(req, n)
        if path.startswith("/v1/responses/") and path.endswith("/cancel"):
            status, obj = self.apis.stored(path.split("/")[3], cancel=True)
            return self.send(status, json.dumps(obj).encode())
        if path == "/v1/messages":
            if req.get("stream"):
                return await self.events(self.apis.message_events(req, n))
            return self.send(200, json.dumps(self.apis.message(req, n)).encode())
        status, obj = self.apis.other(path, req)
        return self.send(status, json.dumps(obj).encode())

    async def respond(self, req: dict[str, object], n: int) -> bool:
        status, obj = self.apis.response(req, n)
        if status != 200 or not req.get("stream"):
            return self.send(status, json.dumps(obj).encode())
        return await self.events(self.apis.response_events(obj))

    async def events(self, events: list[bytes]) -> bool:
        """An SSE stream of ready-made events, each its own chunk, --delay-ms apart (``--fault die-after-N``:
        the connection closes after N events)."""
        fault = self.cfg.fault
        die_after = int(fault.removeprefix("die-after-")) if fault.startswith("die-after-") else -1
        self.write(http_head(200, "text/event-stream", None))
        for i, event in enumerate(events):
            if i == die_after:
                return False
            if self.cfg.delay_ms:
                await asyncio.sleep(self.cfg.delay_ms / 1000)
            self.write(chunked(event))
        self.write(b"0\r\n\r\n")
        return True

    def get(self, path: str) -> bool:
        s = self.stats
        if path == "/health":
            return self.send(200, b"")
        if path == "/v1/models":
            data = self.apis.models(self.cfg.max_model_len)
            return self.send(200, json.dumps({"object": "list", "data": data}).encode())
        if path.startswith("/v1/responses/"):
            status, obj = self.apis.stored(path.split("/")[3], cancel=False)
            return self.send(status, json.dumps(obj).encode())
        if path == "/tokenizer_info":
            info = {"tokenizer_class": "FakeTokenizer", "eos_token": "</s>", "model": self.cfg.model}
            return self.send(200, json.dumps(info).encode())
        if path == "/load":
            return self.send(200, json.dumps({"server_load": s.held}).encode())
        if path == "/metrics":
            if self.cfg.fault == "metrics-500":
                return self.send(500, b"")
            text = (
                f'vllm:num_requests_running{{model_name="{self.cfg.model}"}} {s.inflight}\n'
                f'vllm:num_requests_waiting{{model_name="{self.cfg.model}"}} 0\n'
                f'vllm:generation_tokens_total{{model_name="{self.cfg.model}"}} {s.generated}\n'
                f'vllm:prompt_tokens_total{{model_name="{self.cfg.model}"}} {s.prompted}\n'
            )
            if self.cache is not None:
                text += self.cache.metrics(self.cfg.model)
                text += f'vllm:request_success_total{{model_name="{self.cfg.model}"}} {s.served}\n'
            if self.cfg.kv_blocks:
                text += (
                    f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="{self.cfg.kv_blocks}"}} 1.0\n'
                )

            return self.send(200, text.encode(), "text/plain")
        if path == "/stats":
            stats = {
                "inflight": s.inflight,
                "peak": s.peak,
                "started": s.started,
                "served": s.served,
                "last_headers": s.last_headers,
                "last_body": s.last_body,
                "get_authorization": s.get_authorization,
                "generations": s.generations,
            }
            return self.send(200, json.dumps(stats).encode())
        if path == "/stats/reset":
            s.peak, s.served, s.started = s.inflight, 0, 0
            s.generations.clear()
            return self.send(200, b"{}")
        if path.startswith("/fault/health-delay?ms="):
            s.health_delay_s = float(path.rpartition("=")[2]) / 1000
            return self.send(200, b"{}")
        return self.send(404, b"{}")

    async def generate(self, path: str, headers: dict[str, str], body: bytes) -> bool:
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            return self.send(
                400,
                b'{"error":{"message":"bad json","type":"invalid_request_error","code":null,"param":null}}',
            )
        fault = headers.get("x-fake-fault", self.cfg.fault)
        if fault.startswith(("slow-500-", "slow-503-")):
            await asyncio.sleep(float(fault[len("slow-500-") :]) / 1000)
            fault = fault[len("slow-") : len("slow-500")]
        if fault == "503":  # vLLM's answer while it cannot take work (draining, overloaded, asleep)
            return self.send(
                503,
                b'{"error":{"message":"fake engine unavailable","type":"server_error","code":null,'
                b'"param":null}}',
            )
        if fault == "500":
            return self.send(
                500,
                b'{"error":{"message":"fake engine failure","type":"server_error","code":null,"param":null}}',
            )
        if fault == "400":
            return self.send(
                400,
                b'{"error":{"message":"fake client error","type":"BadRequestError","code":400,"param":null}}',
            )
        if fault == "hang":
            await asyncio.sleep(3600)
        if fault.startswith("slow-first-"):
            await asyncio.sleep(float(fault.removeprefix("slow-first-")) / 1000)
        if self.cfg.log_requests:
            print(f"Received request {headers.get('x-request-id', 'fake')}", file=sys.stderr, flush=True)
        exit_on_prompt(self.cfg.faults, body)
        if self.cfg.latency_ms or self.knobs.latency_ms:
            await asyncio.sleep((self.cfg.latency_ms or self.knobs.latency_ms) / 1000)
        if self.cache is not None:
            blocks, hits = self.cache.admit(prompt_text(req))
            await asyncio.sleep((blocks - hits) * self.cfg.prefill_ms_per_block / 1000)
        rid = headers.get("x-request-id", "fake")
        self.stats.prompted += 8
        if path == "/v1/embeddings":
            data = {
                "object": "list",
                "data": [{"object": "embedding", "index": 0, "embedding": [0.1] * 8}],
                "model": self.cfg.model,
                "usage": {"prompt_tokens": 4, "total_tokens": 4},
            }
            return self.send(200, json.dumps(data).encode())
        n = min(int(req.get("max_tokens") or self.cfg.tokens), MAX_STREAM_TOKENS)
        chat = path == "/v1/chat/completions"
        if req.get("stream") and req.get("return_token_ids"):
            return await self.stream_tokens(
                TokenFrames(
                    req,
                    chat,
                    self.cfg.model,
                    rid,
                    self.cfg.multibyte,
                    self.cfg.tokens,
                    self.cfg.max_model_len,
                    int(self.knobs.event_bytes),
                ),
                fault,
            )
        if not req.get("stream"):
            if fault.startswith(("die-after-", "die-mid-", "stall-after-")):
                return await self.fail_generating(fault)
            self.stats.generated += n
            return self.send(200, completion_body(self.cfg, chat, n, rid))
        die_after = int(fault.removeprefix("die-after-")) if fault.startswith("die-after-") else -1
        die_mid = int(fault.removeprefix("die-mid-")) if fault.startswith("die-mid-") else -1
        stall = int(fault.removeprefix("stall-after-")) if fault.startswith("stall-after-") else -1
        options = req.get("stream_options")
        usage = isinstance(options, dict) and bool(options.get("include_usage"))
        return await self.stream(
            chat, n, rid, max(die_after, die_mid), half=die_mid >= 0, stall=stall, usage=usage
        )

    async def stream(
        self,
        chat: bool,
        n: int,
        rid: str,
        die_after: int,
        half: bool = False,
        stall: int = -1,
        usage: bool = False,
    ) -> bool:
        self.write(http_head(200, "text/event-stream", None))
        delay, pad = (self.knobs.delay_ms or self.cfg.delay_ms) / 1000, int(self.knobs.event_bytes)
        template = event_template(self.cfg, chat, rid)
        for i in range(n):
            if i == stall:
                await asyncio.sleep(3600)
            if i == die_after:
                if half:
                    event = stream_event(self.cfg, chat, i, rid)
                    self.write(chunked(event[: len(event) // 2]))
                return False
            if delay:
                await asyncio.sleep(delay)
            self.stats.generated += 1
            self.write(chunked(template % json.dumps(f"tok{i} ".ljust(pad)).encode()))
        if usage:
            self.write(chunked(usage_event(self.cfg, chat, n, rid)))
        self.write(chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        return True

    async def fail_generating(self, fault: str) -> bool:
        """A non-streamed answer that never comes: after N tokens' time the connection closes (die) or
        nothing more happens (stall)."""
        await asyncio.sleep(int(fault.rpartition("-")[2]) * self.cfg.delay_ms / 1000)
        if fault.startswith("stall-"):
            await asyncio.sleep(3600)
        return False

    async def stream_tokens(self, frames: TokenFrames, fault: str) -> bool:
        """A stream with token ids; a fault ``KIND-after-N`` (or ``die-mid-N``) strikes after N tokens;
        ``busy-after-N-MS``: after N tokens nothing comes for MS ms while the engine works on other
        clients' prompts (its ``vllm:prompt_tokens_total`` advances), then the stream goes on."""
        busy_at, busy_s = busy(fault)
        kind, _, after = fault.replace("die-mid-", "die-mid-after-").rpartition("-after-")
        at = int(after) if kind and after.isdigit() else -1
        self.write(http_head(200, "text/event-stream", None))
        delay = (self.knobs.delay_ms or self.cfg.delay_ms) / 1000
        for j in range(frames.n):
            if j == at:
                return await self.strike(kind, frames.token(j))
            if j == busy_at:
                await self.prefill_others(busy_s)
            if delay:
                await asyncio.sleep(delay)
            self.stats.generated += 1
            self.write(chunked(frames.token(j)))
        if self.cfg.split_tail:  # the usage event and [DONE] each a read of its own, as vLLM's often are
            for event in frames.tail():
                await asyncio.sleep(self.cfg.delay_ms / 1000)
                self.write(chunked(event))
            self.write(b"0\r\n\r\n")
            return True
        self.write(b"".join(chunked(e) for e in frames.tail()) + b"0\r\n\r\n")
        return True

    async def prefill_others(self, seconds: float) -> None:
        """Other clients' long prompts being prefilled: no token for this stream, the engine's prompt
        token counter advancing every 20 ms."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            await asyncio.sleep(0.02)
            self.stats.prompted += 64

    async def strike(self, kind: str, event: bytes) -> bool:
        """die (close), die-mid (half a frame, close), stall (freeze), error (vLLM's error frame),
        garbage (a frame that is not JSON)."""
        if kind == "stall":
            await asyncio.sleep(3600)
        if kind == "die-mid":
            self.write(chunked(event[: len(event) // 2]))
        if kind in ("error", "garbage"):
            bad = error_frame() if kind == "error" else b"data: <html>bad gateway</html>\n\n"
            self.write(chunked(bad) + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            return True
        return False


def busy(fault: str) -> tuple[int, float]:
    """``busy-after-N-MS``: (N, MS in seconds); (-1, 0) for any other fault."""
    if not fault.startswith("busy-after-"):
        return -1, 0.0
    n, _, ms = fault.removeprefix("busy-after-").partition("-")
    return int(n), float(ms) / 1000


async def serve(cfg: Config, host: str, port: int, count: int = 1) -> None:
    """``count`` engines, each with its own stats, on ``port`` .. ``port + count - 1``."""
    loop = asyncio.get_running_loop()
    servers = []
    for p in range(port, port + count):
        stats = Stats()
        apis = FakeApis(cfg.model, tag=str(p), lora=cfg.lora)
        sleep = FakeSleep(cfg.sleep)
        cache = PrefixCache(cfg.prefix_cache_blocks) if cfg.prefix_cache_blocks else None
        knobs = Knobs()
        servers.append(
            await loop.create_server(
                lambda s=stats, a=apis, z=sleep, c=cache, k=knobs: FakeEngine(cfg, s, a, z, c, k),  # type: ignore[misc]
                host, p, backlog=4096,
            )
        )  # fmt: skip
    await asyncio.gather(*(s.serve_forever() for s in servers))


def add_fault_args(p: argparse.ArgumentParser) -> None:
    """The fault suite's options (:class:`FaultConfig`)."""
    p.add_argument("--exit-on-prompt", default="", help="exit 1 once a request holding this is received")
    p.add_argument(
        "--idle-close-ms", type=float, default=0.0, help="close keep-alive connections idle this long"
    )


def add_sleep_wait_args(p: argparse.ArgumentParser) -> None:
    """Sleep mode's memory at level 2 and each call's wait (:class:`SleepWaits`; testing/gpu_profile.py)."""
    p.add_argument("--asleep2-mib", type=int, default=0, help="MiB held at level 2 (0: --asleep-mib)")
    for flag in ("sleep1", "sleep2", "wake1", "wake-weights", "reload", "wake-kv"):
        p.add_argument(f"--{flag}-s", type=float, default=0.0, help="seconds this sleep-mode call takes")


def sleep_waits(a: argparse.Namespace) -> SleepWaits:
    return SleepWaits(a.sleep1_s, a.sleep2_s, a.wake1_s, a.wake_weights_s, a.reload_s, a.wake_kv_s)


def fault_config(a: argparse.Namespace) -> FaultConfig:
    return FaultConfig(a.exit_on_prompt, a.idle_close_ms)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description="FAKE ENGINE: a fast OpenAI-shaped stand-in for vLLM (tests, benchmarks)."
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8199)
    p.add_argument("--model", default="fake-model")
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--split-tail", action="store_true", help="token-id streams: usage, [DONE] apart")
    p.add_argument("--latency-ms", type=float, default=0.0, help="wait before answering any generation")
    p.add_argument("--fault", default="")
    p.add_argument("--multibyte", action="store_true", help="token ids: pieces of UTF-8 characters")
    p.add_argument("--kv-blocks", type=int, default=0, help="report a KV cache of N 16-token blocks")
    p.add_argument("--prefix-cache-blocks", type=int, default=0, help="model a prefix cache of N blocks")
    p.add_argument("--prefill-ms-per-block", type=float, default=0.0, help="wait per missed block")
    p.add_argument("--ports", type=int, default=1, help="serve N engines on consecutive ports")
    p.add_argument("--no-lora", action="store_true", help="refuse /v1/load_lora_adapter")
    p.add_argument("--api-key", default="", help="guard /v1/* with this Bearer key, as vLLM's --api-key")
    p.add_argument("--enable-sleep-mode", action="store_true", help="serve vLLM's sleep endpoints")
    p.add_argument("--dummy-weights", action="store_true", help="as --load-format dummy: no reload")
    p.add_argument("--memory-file", default="", help="write the MiB held on the (fake) GPU here")
    p.add_argument("--awake-mib", type=int, default=10240)
    p.add_argument("--asleep-mib", type=int, default=1024)
    p.add_argument("--sleep-calls-file", default="", help="append every sleep-mode call here")
    add_sleep_wait_args(p)
    p.add_argument("--tool-strict-level", default="", help="vLLM's flag (the default fleet sets it): ignored")
    p.add_argument("--max-model-len", type=int, default=2048, help="what /v1/models says of the context")
    p.add_argument("--enable-log-requests", action="store_true", help="as vLLM's: log each generation's id")
    p.add_argument("--crash-on", default="", help="close the connection of a POST whose body holds this")
    p.add_argument("--start-delay-s", type=float, default=0.0, help="wait before listening (loading weights)")
    p.add_argument("--preprocess-ms", type=float, default=0.0, help="a generation's wait before the engine")
    p.add_argument(
        "--engine-core", action="store_true", help="fork a child in its group (vLLM's engine core)"
    )
    add_fault_args(p)
    a = p.parse_args(argv)
    if a.engine_core:  # outlives this process when it is killed alone, as vLLM's engine core does
        subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"], stdin=subprocess.DEVNULL)
    time.sleep(a.start_delay_s)
    sleep = SleepConfig(
        a.enable_sleep_mode, a.dummy_weights, a.memory_file, a.awake_mib, a.asleep_mib, a.sleep_calls_file,
        a.asleep2_mib, sleep_waits(a),
    )  # fmt: skip
    cfg = Config(
        a.model, a.tokens, a.delay_ms, a.fault, a.latency_ms, a.kv_blocks, not a.no_lora, a.api_key, sleep,
        prefix_cache_blocks=a.prefix_cache_blocks, prefill_ms_per_block=a.prefill_ms_per_block,
        multibyte=a.multibyte, max_model_len=a.max_model_len, log_requests=a.enable_log_requests,
        split_tail=a.split_tail, crash_on=a.crash_on, faults=fault_config(a), preprocess_ms=a.preprocess_ms,
    )  # fmt: skip
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(serve(cfg, a.host, a.port, a.ports))


if __name__ == "__main__":
    main()
