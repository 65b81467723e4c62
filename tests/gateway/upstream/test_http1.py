"""The hand-written HTTP/1.1 client against a tiny TCP server (written here) that sends exact bytes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from gateway.settings import GatewaySettings
from gateway.upstream.http1 import ConnectionPool, Origin, Sent, UpstreamClosed
from testing.poll import until

CRASH = b""
"""A reply that is none: the request is read, then the connection closed (an engine that crashed on it)."""
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


@dataclass
class ExactServer:
    """Answers each request (read up to the blank line; bodies here fit one read) with the next reply."""

    replies: list[bytes]
    accepted: int = 0
    requests: int = 0
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
            self.requests += 1
            reply = self.replies.pop(0)
            if reply == CRASH:
                writer.close()
                return
            writer.write(reply)
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


async def test_a_written_request_whose_connection_closes_is_not_sent_again() -> None:
    """The replica read the request on a reused connection, then closed it without a byte of answer: it
    may have begun the generation, so the request is not sent again on a fresh connection."""
    async with exact_server([OK, CRASH, OK]) as (srv, origin):
        assert await post(origin) == (200, b"ok")
        sent = Sent()
        with pytest.raises(UpstreamClosed):
            await post(origin, sent)
        assert sent.written
        assert srv.requests == 2 and srv.accepted == 1


async def test_a_written_request_on_a_fresh_connection_is_not_sent_again() -> None:
    async with exact_server([CRASH, OK]) as (srv, origin):
        sent = Sent()
        with pytest.raises(UpstreamClosed):
            await post(origin, sent)
        assert sent.written and srv.requests == 1


async def test_an_idle_connection_is_dropped_before_the_replicas_keepalive_timeout() -> None:
    """A connection idle for ``idle_s`` is closed instead of reused, so that a reused one is not found
    closed by the replica's own keep-alive timeout (uvicorn's 5 s) after the request was written."""
    now = [100.0]
    async with exact_server([OK, OK, OK]) as (srv, origin):
        origin.clock = lambda: now[0]
        assert await post(origin) == (200, b"ok")
        now[0] += origin.idle_s - 0.1
        assert await post(origin) == (200, b"ok")
        assert srv.accepted == 1  # young enough: reused
        now[0] += origin.idle_s + 0.1
        assert await post(origin) == (200, b"ok")
        assert srv.accepted == 2  # idle too long: dropped, a fresh connection instead
        assert len(origin.idle) == 1  # the old one closed, not kept beside it


async def test_a_connection_closed_while_idle_is_replaced_before_the_write() -> None:
    """The replica closed an idle connection: found closed before anything was written, the request goes
    on a fresh one (nothing can have run it)."""
    async with exact_server([OK, OK]) as (srv, origin):
        assert await post(origin) == (200, b"ok")
        srv.writers[0].close()
        await until(lambda: not origin.idle, 5, "the closed connection forgotten")
        sent = Sent()
        assert await post(origin, sent) == (200, b"ok")
        assert srv.accepted == 2 and srv.requests == 2 and sent.written


def test_the_idle_bound_is_below_uvicorns_keepalive_timeout() -> None:
    """vLLM serves with uvicorn, whose keep-alive timeout is 5 s: the default idle bound is shorter."""
    default = GatewaySettings.model_fields["upstream_idle_s"].default
    assert default < 5.0
    assert ConnectionPool(idle_s=default).origin("http://127.0.0.1:1")[0].idle_s == default
