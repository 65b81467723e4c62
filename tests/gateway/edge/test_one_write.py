"""uvicorn with the one-write protocol (gateway/edge/one_write.py), on a real socket: the head held back for
the body still makes exact HTTP/1.1 for whole, chunked, HEAD, bodiless, closing and pipelined answers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from gateway.edge.one_write import OneWriteProtocol
from testing.poll import until


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers by path: /whole (Content-Length), /stream (chunked, three parts), /empty (204),
    /close (Connection: close)."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    path = scope["path"]
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"a", b"bb", b"ccc"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    status, body = (204, b"") if path == "/empty" else (200, b"hello")
    headers = [(b"content-length", str(len(body)).encode())] if status != 204 else []
    if path == "/close":
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def serving() -> AsyncIterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, http=OneWriteProtocol, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await until(lambda: server.started, 10, "uvicorn started")
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await task


async def exchange(port: int, raw: bytes) -> bytes:
    """Send ``raw`` and read until the server closes the connection (the last request asks it to)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return data


def request(method: str, path: str, close: bool = False) -> bytes:
    connection = b"connection: close\r\n" if close else b""
    return f"{method} {path} HTTP/1.1\r\nhost: t\r\n".encode() + connection + b"\r\n"


async def test_whole_answer_is_head_and_body() -> None:
    async with serving() as port:
        data = await exchange(port, request("GET", "/whole", close=True))
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"content-length: 5" in head
    assert body == b"hello"


async def test_chunked_stream_keeps_its_parts_in_order() -> None:
    async with serving() as port:
        data = await exchange(port, request("GET", "/stream", close=True))
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head
    assert body == b"1\r\na\r\n2\r\nbb\r\n3\r\nccc\r\n0\r\n\r\n"


async def test_head_request_and_bodiless_answers_still_send_their_head() -> None:
    async with serving() as port:
        data = await exchange(port, request("HEAD", "/whole") + request("GET", "/empty", close=True))
    first, _, rest = data.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: 5" in first
    assert rest.startswith(b"HTTP/1.1 204 No Content\r\n")
    assert rest.endswith(b"\r\n\r\n") and b"hello" not in data


async def test_pipelined_requests_and_a_closing_answer() -> None:
    raw = request("GET", "/whole") + request("GET", "/stream") + request("GET", "/close")
    async with serving() as port:
        data = await exchange(port, raw)
    assert data.count(b"HTTP/1.1 200 OK\r\n") == 3
    assert data.index(b"hello") < data.index(b"1\r\na\r\n") < data.rindex(b"hello")
    assert data.endswith(b"\r\n\r\nhello")
