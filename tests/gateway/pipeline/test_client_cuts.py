"""A streamed request whose client leaves gives back everything it held, once (real gateway in this
process, FAKE ENGINE, real Redis): the replica's in-flight count (the routing policies' load view) is 0
again, never below, its admission slot is out of Redis, the gateway holds no open request, and the
replica saw its connection close. Cut before the answer's head, while the head is sent, and mid-stream;
for a stream that may move (a chat model's default: gateway/migration/) and a plain one."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI
from starlette.types import Message, Scope

from gateway.replicas.table import Endpoint
from gateway.state import Gateway
from gateway.values import ABORT, FLOW, GONE
from llmgw_contract.redis_keys import RedisKeys
from testing.gateway import fleet_yaml, register, serve_app
from testing.poll import until
from testing.procs import free_port_run, start_fake_engine

FLEET = fleet_yaml(
    [
        {"name": "moving", "source": {"path": "/nonexistent"}},  # a chat model: its streams may move
        {"name": "plain", "source": {"path": "/nonexistent"}, "migration": False},
    ]
)
MODELS = ("moving", "plain")
GIVEN_BACK = {"replica_inflight": 0, "open_requests": 0, "admission_leases": 0, "engine_inflight": 0}


def stream(model: str) -> dict[str, Any]:
    """A stream of 20 s at the engine's 100 ms between events: still running when its client leaves."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 200,
        "stream": True,
    }


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One FAKE ENGINE per model (one process, ``--ports``): a model's leak shows in its own counts."""
    port = free_port_run(len(MODELS))
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"), "--ports", "2", "--delay-ms", "100", port=port)
    yield {model: f"http://127.0.0.1:{port + i}" for i, model in enumerate(MODELS)}
    proc.stop()


class Served:
    """A gateway in this process over one replica (one slot) per model, each on its own engine."""

    def __init__(
        self, url: str, app: FastAPI, redis: aioredis.Redis, prefix: str, engines: dict[str, str]
    ) -> None:
        self.url, self.app = url, app
        self.gw: Gateway = app.state.gateway
        self.redis, self.keys, self.engines = redis, RedisKeys(prefix), engines

    def replica(self, model: str) -> Endpoint:
        pool = self.gw.table.find(model)
        assert pool is not None and len(pool.endpoints) == 1
        return pool.endpoints[0]

    async def held(self, model: str, http: httpx.AsyncClient) -> dict[str, int]:
        return {
            "replica_inflight": self.replica(model).inflight,
            "open_requests": len(self.gw.open_requests),
            "admission_leases": int(await self.redis.zcard(self.keys.leases(model))),
            "engine_inflight": await engine_inflight(self.engines[model], http),
        }

    async def given_back(self, model: str, http: httpx.AsyncClient) -> None:
        """Polled until the stream gave everything back; then exactly nothing is held (a count decremented
        twice reads -1)."""
        with contextlib.suppress(AssertionError):
            await until(lambda: self._zero(model, http), 10.0, "the stream's holdings given back")
        assert await self.held(model, http) == GIVEN_BACK

    async def _zero(self, model: str, http: httpx.AsyncClient) -> bool:
        return await self.held(model, http) == GIVEN_BACK


@pytest.fixture(scope="module")
async def served(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, engines: dict[str, str]
) -> AsyncIterator[Served]:
    """One gateway for the module: each test's last check is that it left nothing held (a leak
    stays, so the test that shows one runs last)."""
    tmp_path, prefix = tmp_path_factory.mktemp("gw"), f"t{uuid.uuid4().hex[:10]}"
    for model in MODELS:
        await register(redis_url, prefix, model, engines[model], f"{model}-0", concurrency=1)
    redis = aioredis.Redis.from_url(redis_url)
    try:
        async with serve_app(tmp_path, FLEET, redis_url, prefix, health_interval_s=60) as (url, app):
            yield Served(url, app, redis, prefix, engines)
    finally:
        await redis.aclose()


async def test_a_client_gone_before_the_head_ends_the_attempt(
    served: Served, http: httpx.AsyncClient
) -> None:
    """The replica took the stream but its first event is late (the gateway gives no head before it):
    the client leaves meanwhile (no source chosen yet: one model is enough)."""
    model = "moving"
    engine = served.engines[model]
    await http.get(f"{engine}/fault/delay?ms=5000")
    try:
        client = asyncio.ensure_future(http.post(f"{served.url}/v1/chat/completions", json=stream(model)))
        await until(lambda: served.replica(model).inflight == 1, 10.0, "the stream sent to the replica")
        await until(lambda: engine_inflight(engine, http), 10.0, "the stream begun by the replica")
        assert not client.done()
        client.cancel()  # its connection closed
        await asyncio.gather(client, return_exceptions=True)
        await served.given_back(model, http)
    finally:
        await http.get(f"{engine}/fault/delay?ms=0")


@pytest.mark.parametrize("model", MODELS)
async def test_a_client_gone_mid_stream_ends_the_attempt(
    served: Served, http: httpx.AsyncClient, model: str
) -> None:
    async with httpx.AsyncClient(timeout=10) as leaving:
        async with leaving.stream("POST", f"{served.url}/v1/chat/completions", json=stream(model)) as r:
            assert r.status_code == 200
            chunks = r.aiter_bytes()
            assert (await anext(chunks)).startswith(b"data: ")
            assert (await anext(chunks)).startswith(b"data: ")
            assert served.replica(model).inflight == 1
    await served.given_back(model, http)


async def test_a_client_gone_while_a_whole_answer_moves_ends_the_attempt(
    served: Served, http: httpx.AsyncClient
) -> None:
    """A non-streamed answer that may move is read as a stream and assembled (gateway/pipeline/
    migrate.py ``whole_continued``): the client leaves once its tokens come. (A plain one's cut before
    its head is the stream's above; its body comes whole with its head.)"""
    model = "moving"
    engine = served.engines[model]
    before = await generated(engine, http)
    client = asyncio.ensure_future(
        http.post(f"{served.url}/v1/chat/completions", json={**stream(model), "stream": False})
    )
    await until(lambda: generated_since(engine, http, before), 10.0, "tokens generated")
    assert orjson.loads((await http.get(f"{engine}/stats")).json()["last_body"])["stream"] is True
    assert not client.done()
    client.cancel()
    await asyncio.gather(client, return_exceptions=True)
    await served.given_back(model, http)


@pytest.mark.parametrize("model", MODELS)
async def test_a_whole_stream_ends_its_attempt_once(
    served: Served, http: httpx.AsyncClient, model: str
) -> None:
    """In flight 1 while it streams, 0 once it ended: its end is counted once, never twice."""
    body = {**stream(model), "max_tokens": 3}
    async with http.stream("POST", f"{served.url}/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        chunks = r.aiter_bytes()
        assert (await anext(chunks)).startswith(b"data: ")
        assert served.replica(model).inflight == 1
        rest = b"".join([c async for c in chunks])
    assert rest.endswith(b"data: [DONE]\n\n")
    await served.given_back(model, http)


@pytest.mark.parametrize("model", MODELS)
async def test_a_client_gone_while_its_head_is_sent_ends_the_attempt(
    served: Served, http: httpx.AsyncClient, model: str
) -> None:
    """The answer's head is given (the replica said 200, its first event read) and its send waits (as
    uvicorn's does while the connection's writes are paused) when the client leaves: the response's
    cancel closes the relay at its first ``yield``, before the relay loop began."""
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()
    body = orjson.dumps(stream(model))
    path = "/v1/chat/completions"
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
        GONE: gone,
        FLOW: None,
        ABORT: lambda: None,
    }
    messages: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
    heads: list[int] = []

    async def receive() -> Message:
        if messages:
            return messages.pop()
        await gone
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            heads.append(message["status"])
            gone.set_result(None)  # the client leaves while its head is being written
            await loop.create_future()  # a write that waits for the client

    await asyncio.wait_for(served.app(scope, receive, send), 10.0)
    assert heads == [200]
    await served.given_back(model, http)


async def engine_inflight(engine: str, http: httpx.AsyncClient) -> int:
    return int((await http.get(f"{engine}/stats")).json()["inflight"])


async def generated(engine: str, http: httpx.AsyncClient) -> float:
    for line in (await http.get(f"{engine}/metrics")).text.splitlines():
        if line.startswith("vllm:generation_tokens_total"):
            return float(line.split()[-1])
    return 0.0


async def generated_since(engine: str, http: httpx.AsyncClient, before: float) -> bool:
    return await generated(engine, http) >= before + 2
