"""The hand-written HTTP/1.1 client against a tiny TCP server (written here) that sends exact bytes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from gateway.upstream.http1 import ConnectionPool, Origin, Sent
from testing.poll import until


@dataclass
class ExactServer:
    """Answers each request (read up to the blank line; bodies here fit one read) with the next reply."""

    replies: list[bytes]
    accepted: int = 0
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.writers.append(writer)
        while self.replies:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:  # the client closed the connection
                return
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.startswith(b"content-length")
            )
            await reader.readexactly(length)
            writer.write(self.replies.pop(0))
            await writer.drain()


@asynccontextmanager
async def exact_server(replies: list[bytes]) -> AsyncIterator[tuple[ExactServer, Origin]]:
    srv = ExactServer(replies)
    server = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = ConnectionPool()
    origin, _ = pool.origin(f"http://127.0.0.1:{port}")
    try:
        yield srv, origin
    finally:
        pool.close()
        for w in srv.writers:
            w.close()
        server.close()


async def post(origin: Origin, sent: Sent | None = None) -> tuple[int, bytes]:
    response = await origin.post(b"/v1/x", [(b"content-type", b"application/json")], b"{}", sent)
    body = await response.read()
    return response.status, body


async def test_status_line_without_reason_phrase() -> None:
    async with exact_server([b"HTTP/1.1 503\r\ncontent-length: 4\r\n\r\nbusy"]) as (_, origin):
        assert await post(origin) == (503, b"busy")


async def test_status_line_with_reason_phrase() -> None:
    async with exact_server([b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]) as (_, origin):
        sent = Sent()
        assert await post(origin, sent) == (200, b"ok")
        assert sent.written


async def test_keepalive_connection_is_reused() -> None:
    ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    async with exact_server([ok, ok]) as (srv, origin):
        assert await post(origin) == (200, b"ok")
        assert await post(origin) == (200, b"ok")
        assert srv.accepted == 1


async def test_bytes_after_a_complete_response_close_the_connection() -> None:
    first = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    extra = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale"
    second = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfresh"
    async with exact_server([first + extra, second]) as (srv, origin):
        assert await post(origin) == (200, b"ok")
        await until(lambda: not origin.idle, 5, "the spoiled connection closed")
        assert await post(origin) == (200, b"fresh")
        assert srv.accepted == 2
