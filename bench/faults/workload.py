"""The fault suite's mixed workload: every API the gateway serves (chat, completions, embeddings, Responses,
Messages, rerank, score), streamed and not, with tools, from tenants with keys and limits; each request
with its own ``X-Request-Id`` (so the engines' logs tell its generations), each outcome judged by
bench/faults/checks.py."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.faults.checks import CUT, DROPPED, LOST, Outcome, judge_stream, judge_whole

CHAT, EMBED, ON_DEMAND = "fault-chat", "fault-embed", "fault-od"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


@dataclass(frozen=True)
class Request:
    kind: str
    path: str
    body: dict[str, Any]
    stream: bool


def mix(max_tokens: int) -> list[Request]:
    """One request of each kind the suite sends (the FAKE ENGINE answers them all)."""
    msgs = [{"role": "user", "content": "Tell me about the sea."}]
    chat = {"model": CHAT, "messages": msgs, "max_tokens": max_tokens}
    anth = {"model": CHAT, "max_tokens": max_tokens, "messages": msgs}
    return [
        Request("chat", "/v1/chat/completions", chat, False),
        Request("chat-stream", "/v1/chat/completions", {**chat, "stream": True}, True),
        Request("chat-tools", "/v1/chat/completions", {**chat, "tools": TOOLS, "tool_choice": "auto"}, False),
        Request("completion", "/v1/completions",
                {"model": CHAT, "prompt": "Once upon a time", "max_tokens": max_tokens}, False),
        Request("completion-stream", "/v1/completions",
                {"model": CHAT, "prompt": "The sea is", "max_tokens": max_tokens, "stream": True}, True),
        Request("responses", "/v1/responses", {"model": CHAT, "input": "Hi", "max_output_tokens": max_tokens},
                False),
        Request("responses-stream", "/v1/responses",
                {"model": CHAT, "input": "Hi", "max_output_tokens": max_tokens, "stream": True}, True),
        Request("messages", "/v1/messages", anth, False),
        Request("messages-stream", "/v1/messages", {**anth, "stream": True}, True),
        Request("embedding", "/v1/embeddings", {"model": EMBED, "input": "the sea"}, False),
        Request("rerank", "/v1/rerank", {"model": EMBED, "query": "sea", "documents": ["a", "b"]}, False),
        Request("score", "/v1/score", {"model": EMBED, "text_1": "sea", "text_2": "ocean"}, False),
    ]  # fmt: skip


def with_prompt(req: Request, text: str) -> Request:
    """``req`` with ``text`` in its prompt (the FAKE ENGINE's prompt-triggered faults)."""
    body = dict(req.body)
    if "messages" in body:
        body["messages"] = [{"role": "user", "content": text}]
    elif "prompt" in body:
        body["prompt"] = text
    elif "input" in body:
        body["input"] = text
    elif "query" in body:
        body["query"] = text
    return Request(req.kind, req.path, body, req.stream)


async def send(
    client: httpx.AsyncClient,
    url: str,
    req: Request,
    rid: str,
    headers: dict[str, str],
    read_pause_s: float = 0,
) -> Outcome:
    """One request with its own ``X-Request-Id``, judged; ``read_pause_s``: a slow reader of a stream."""
    hdrs = {**headers, "x-request-id": rid}
    try:
        if not req.stream:
            r = await client.post(url + req.path, json=req.body, headers=hdrs)
            return Outcome(req.kind, False, *judge_whole(r.status_code, r.content))
        async with client.stream("POST", url + req.path, json=req.body, headers=hdrs) as r:
            if r.status_code != 200:
                return Outcome(req.kind, True, *judge_whole(r.status_code, await r.aread()))
            events = []
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    events.append(line.removeprefix("data:").strip().encode())
                    if read_pause_s:
                        await asyncio.sleep(read_pause_s)
            return Outcome(req.kind, True, *judge_stream(events))
    except httpx.TimeoutException as exc:
        return Outcome(req.kind, req.stream, LOST, f"client timeout ({type(exc).__name__})")
    except httpx.HTTPError as exc:
        return Outcome(req.kind, req.stream, CUT, f"{type(exc).__name__}: {exc}")


@dataclass
class Load:
    """``clients`` closed-loop clients through nginx, each sending the next kind of request as the next
    tenant, until stopped; ids ``<prefix><n>``; outcomes kept in order."""

    url: str
    tenants: list[dict[str, str]]
    reqs: list[Request]
    prefix: str
    clients: int = 4
    timeout_s: float = 30.0
    pause_s: float = 0.05
    seed: int = 0
    outcomes: list[Outcome] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    seq: itertools.count[int] = field(default_factory=itertools.count)

    def next_id(self) -> str:
        return f"{self.prefix}{next(self.seq)}"

    async def one(self, client: httpx.AsyncClient, req: Request, tenant: dict[str, str]) -> Outcome:
        out = await send(client, self.url, req, self.next_id(), tenant)
        self.outcomes.append(out)
        return out

    async def client(self, c: int) -> None:
        rng = random.Random(self.seed * 1000 + c)
        kinds = itertools.cycle(self.reqs[c % len(self.reqs) :] + self.reqs[: c % len(self.reqs)])
        timeout = httpx.Timeout(self.timeout_s, connect=5.0)
        async with httpx.AsyncClient(timeout=timeout) as client:
            while not self.stop.is_set():
                await self.one(client, next(kinds), rng.choice(self.tenants))
                await asyncio.sleep(rng.uniform(0, 2 * self.pause_s))

    async def run(self) -> None:
        await asyncio.gather(*(self.client(c) for c in range(self.clients)))


async def slow_uploads(
    url: str, n: int, deadline_s: float, chunk: int = 1024, every_s: float = 1.0
) -> list[Outcome]:
    """``n`` uploads without a key, a body of 1 MiB declared and ``chunk`` bytes sent every ``every_s``,
    on raw sockets that read what the server answers while they send (an HTTP client that writes first
    would miss an answer sent before the body ended): each must end with an answer or a clear error (401,
    408, 413) within ``deadline_s``, else it is lost; a connection closed without an answer is cut."""
    host, _, port = url.removeprefix("http://").partition(":")

    async def one() -> Outcome:
        reader, writer = await asyncio.open_connection(host, int(port))
        head = f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        writer.write(f"{head}content-length: {1 << 20}\r\n\r\n".encode() + b'{"model": "' + CHAT.encode())
        try:
            return await asyncio.wait_for(trickle(reader, writer), deadline_s)
        except TimeoutError:
            return Outcome("slow-upload", False, LOST, f"no answer within {deadline_s:g} s")
        finally:
            writer.close()

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Outcome:
        got = b""
        while not got:
            try:
                got = await asyncio.wait_for(reader.read(65536), every_s)
            except TimeoutError:
                with contextlib.suppress(ConnectionError):
                    writer.write(b"x" * chunk)
                    await writer.drain()
                continue
            except ConnectionError as exc:
                return Outcome("slow-upload", False, CUT, f"{type(exc).__name__} before any answer")
            if not got:
                return Outcome("slow-upload", False, CUT, "closed before any answer")
        while b"\r\n\r\n" in got and not answer_complete(got):
            more = await reader.read(65536)
            if not more:
                break
            got += more
        status, _, body = got.partition(b"\r\n\r\n")
        return Outcome("slow-upload", False, *judge_whole(int(status.split()[1]), body))

    return list(await asyncio.gather(*(one() for _ in range(n))))


async def slow_read(
    url: str,
    req: Request,
    rid: str,
    headers: dict[str, str],
    ended: Callable[[], Awaitable[bool]],
    deadline_s: float,
    rcvbuf: int = 4096,
    take: int = 256,
    every_s: float = 0.25,
) -> Outcome:
    """A stream read by a client that takes ``take`` bytes every ``every_s`` from a raw socket whose
    receive buffer is ``rcvbuf`` bytes, until ``ended()`` says the server ended it; then the rest at once
    (a server that drops a connection leaves what its socket holds, megabytes, to be delivered first).
    Dropped: the connection closed before the stream's last event; lost: still held at ``deadline_s``,
    no stream, or a stream that ran to its end."""
    host, _, port = url.removeprefix("http://").partition(":")
    body = json.dumps(req.body).encode()
    head = [f"POST {req.path} HTTP/1.1", f"host: {host}", "content-type: application/json",
            f"x-request-id: {rid}", f"content-length: {len(body)}"]  # fmt: skip
    head += [f"{k}: {v}" for k, v in headers.items()]
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect: the window it offers
    sock.setblocking(False)
    got, started, slow, took = b"", time.monotonic(), b"", 0.0
    try:
        await loop.sock_connect(sock, (host, int(port)))
        await loop.sock_sendall(sock, ("\r\n".join(head) + "\r\n\r\n").encode() + body)
        while not await ended():
            if time.monotonic() - started > deadline_s:
                return Outcome(req.kind, True, LOST, f"still held after {deadline_s:g} s")
            await asyncio.sleep(every_s)
            got += await asyncio.wait_for(loop.sock_recv(sock, take), deadline_s)
        took, slow = time.monotonic() - started, got
        while more := await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), 10.0):
            got += more
    except (ConnectionError, TimeoutError):  # reset, or silent: what came so far is judged
        slow, took = slow or got, took or time.monotonic() - started
    finally:
        sock.close()
    if b" 200 " not in got.split(b"\r\n", 1)[0]:
        return Outcome(req.kind, True, LOST, f"no stream: {got[:120]!r}")
    if not slow or b"[DONE]" in got[-64:]:
        return Outcome(req.kind, True, LOST, f"not ended by the server ({len(got)} bytes)")
    return Outcome(req.kind, True, DROPPED, f"ended by the server after {took:.1f} s, {len(slow)} bytes read "
                   f"slowly, {len(got)} bytes in all")  # fmt: skip


def answer_complete(data: bytes) -> bool:
    """A response head and as much body as its Content-Length says."""
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return True
