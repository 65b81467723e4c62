"""A small HTTP/1.1 client for the hot path: keep-alive pools per upstream, httptools parsing.

The gateway's cost per request is dominated by its upstream client (httpx spent more CPU per
request than all the rest of the gateway together: docs/decisions/0010-own-upstream-client.md).
This client does only what forwarding needs: a POST (or GET) with a byte body, the status, the
headers, and the body as the chunks arrive (Content-Length or chunked), with TCP_NODELAY and connection reuse.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httptools

BUFFER_HIGH = 64 * 1024  # unread body bytes past which a connection stops reading (vLLM's flow control holds)
IDLE_S = 4.0  # idle connections reused within this (LLMGW_UPSTREAM_IDLE_S); uvicorn closes them at 5 s


class UpstreamClosed(ConnectionError):
    """The upstream closed the connection before the response was complete."""


@dataclass(slots=True)
class Sent:
    """Whether a request's bytes were handed to a connection: from then on the upstream may be running it."""

    written: bool = False


@dataclass(eq=False)
class _Conn(asyncio.Protocol):
    pool: Origin
    transport: asyncio.Transport | None = None
    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    chunks: collections.deque[bytes] = field(default_factory=collections.deque)
    waiter: asyncio.Future[None] | None = None
    head_done: bool = False
    complete: bool = False
    closed: bool = False
    error: Exception | None = None
    spoiled: bool = False
    buffered: int = 0
    paused: bool = False
    idle_since: float = 0.0

    def __post_init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        """Feed the parser; bytes past a complete response spoil the connection (closed, never reused)."""
        if self.complete:
            self.spoiled = True
        else:
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError as exc:
                self.fail(UpstreamClosed(f"bad response from upstream: {exc}"))
        if self.spoiled and self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete:
            self.fail(UpstreamClosed("upstream closed the connection"))
        self.pool.forget(self)

    # httptools callbacks
    def on_message_begin(self) -> None:
        if self.complete:  # a second response to one request: the upstream is out of step
            self.spoiled = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.spoiled:
            return
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if self.spoiled:
            return
        # here, not in on_status: llhttp calls on_status only for a status line with a reason phrase
        self.status = self.parser.get_status_code()
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.spoiled:
            return
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > BUFFER_HIGH and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def taken(self) -> None:
        """The reader took every buffered chunk: read from the upstream again if paused."""
        self.chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()

    def on_message_complete(self) -> None:
        if self.spoiled:
            return
        self.complete = True
        self._wake()

    def fail(self, exc: Exception) -> None:
        self.error = exc
        self._wake()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    # used by Response
    def reset(self) -> None:
        self.status, self.head_done, self.complete = 0, False, False
        self.headers, self.error = [], None
        self.taken()
        self.parser = httptools.HttpResponseParser(self)

    async def wait(self) -> None:
        if self.error is not None:
            raise self.error
        self.waiter = asyncio.get_running_loop().create_future()
        await self.waiter
        self.waiter = None
        if self.error is not None and not self.chunks and not self.complete:
            raise self.error


class Response:
    """One upstream response: status and headers known; the body comes chunk by chunk."""

    __slots__ = ("_conn", "_done", "headers", "status")

    def __init__(self, conn: _Conn) -> None:
        self._conn = conn
        self.status = conn.status
        self.headers = conn.headers
        self._done = False

    def header(self, name: bytes, default: bytes = b"") -> bytes:
        for k, v in self.headers:
            if k == name:
                return v
        return default

    async def next_chunk(self) -> bytes:
        """The next piece of the body as it arrived; b'' once the body is complete."""
        conn = self._conn
        while not conn.chunks:
            if conn.complete:
                self._finish()
                return b""
            await conn.wait()
        chunk = conn.chunks.popleft() if len(conn.chunks) == 1 else b"".join(conn.chunks)
        conn.taken()
        return chunk

    def interrupt(self, exc: Exception) -> bool:
        """Wake a reader waiting in :meth:`next_chunk` with ``exc`` (the connection is not reused)."""
        waiter = self._conn.waiter
        if waiter is None or waiter.done():
            return False
        self._conn.fail(exc)
        return True

    @property
    def arrived(self) -> bool:
        """The whole body is here: reading the rest will not wait."""
        return self._conn.complete

    async def read(self) -> bytes:
        parts = []
        while chunk := await self.next_chunk():
            parts.append(chunk)
        return b"".join(parts)

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self._conn.pool.give_back(self._conn)

    def close(self) -> None:
        """Give the connection back when the body was read to the end, else close it."""
        if self._done:
            return
        self._done = True
        conn = self._conn
        if conn.complete and not conn.chunks:
            conn.pool.give_back(conn)
        elif conn.transport is not None:
            conn.transport.close()


class Origin:
    """Idle keep-alive connections to one host:port, each reused only within ``idle_s`` of its last
    answer: shorter than the upstream's own keep-alive timeout (uvicorn's, vLLM's server: 5 s), so that a
    reused connection is not closed by the upstream as the request is written."""

    def __init__(
        self,
        host: str,
        port: int,
        max_idle: int,
        tls: ssl.SSLContext | None = None,
        connect_s: float = 2.0,
        idle_s: float = IDLE_S,
    ) -> None:
        self.host, self.port, self.max_idle, self.tls, self.connect_s = host, port, max_idle, tls, connect_s
        self.idle_s, self.clock = idle_s, time.monotonic
        self.idle: list[_Conn] = []
        self.retired = False
        self.host_header = f"{host}:{port}".encode()

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self.connect_s):
            _, conn = await loop.create_connection(lambda: _Conn(self), self.host, self.port, ssl=self.tls)
        return conn

    def _take(self) -> _Conn | None:
        """The most recently used idle connection that is open and was idle less than ``idle_s``; those
        idle longer are closed (all of them: the list is oldest first)."""
        stale_before = self.clock() - self.idle_s
        while self.idle:
            conn = self.idle.pop()
            if conn.idle_since < stale_before:
                self.idle.append(conn)
                self.close_idle()
                return None
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    def give_back(self, conn: _Conn) -> None:
        full = len(self.idle) >= self.max_idle
        if self.retired or conn.closed or conn.spoiled or conn.error is not None or full:
            if conn.transport is not None:
                conn.transport.close()
            return
        conn.idle_since = self.clock()
        self.idle.append(conn)

    def forget(self, conn: _Conn) -> None:
        if conn in self.idle:
            self.idle.remove(conn)

    def close(self) -> None:
        """Close the idle connections; those still in use are closed when given back."""
        self.retired = True
        self.close_idle()

    def close_idle(self) -> None:
        for conn in self.idle:
            if conn.transport is not None:
                conn.transport.close()
        self.idle.clear()

    def _head(
        self, path: bytes, headers: list[tuple[bytes, bytes]], body: bytes, method: bytes = b"POST"
    ) -> bytes:
        lines = [method, b" ", path, b" HTTP/1.1\r\nhost: ", self.host_header, b"\r\ncontent-length: "]
        lines += [str(len(body)).encode(), b"\r\n"]
        for k, v in headers:
            lines += [k, b": ", v, b"\r\n"]
        lines.append(b"\r\n")
        return b"".join(lines)

    async def post(
        self,
        path: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        sent: Sent | None = None,
        method: bytes = b"POST",
    ) -> Response:
        """Send a POST (or ``method``) and wait for the response head, on an idle connection (one found
        closed before the write is skipped) or a fresh one. ``sent`` is marked as soon as the request's
        bytes are written: from then on the upstream may be running it, and a connection that breaks is
        never retried here (the generation would run twice)."""
        conn = self._take() or await self._connect()
        conn.reset()
        assert conn.transport is not None
        conn.transport.write(self._head(path, headers, body, method) + body)
        if sent is not None:
            sent.written = True
        try:
            while not conn.head_done:
                await conn.wait()
        except BaseException:
            conn.transport.close()
            raise
        return Response(conn)


class ConnectionPool:
    """One Origin per upstream; owned by the gateway's lifespan."""

    def __init__(
        self, max_idle_per_origin: int = 256, connect_s: float = 2.0, idle_s: float = IDLE_S
    ) -> None:
        self.max_idle, self.connect_s, self.idle_s = max_idle_per_origin, connect_s, idle_s
        self.origins: dict[str, tuple[Origin, bytes]] = {}

    def origin(self, url: str) -> tuple[Origin, bytes]:
        """The origin of an http(s)://host:port[/prefix] URL, and the path prefix."""
        found = self.origins.get(url)
        if found is None:
            found = self.origins[url] = self._make(url)
        return found

    def _make(self, url: str) -> tuple[Origin, bytes]:
        parsed = urlsplit(url)
        tls = ssl.create_default_context() if parsed.scheme == "https" else None
        port = parsed.port or (443 if tls else 80)
        origin = Origin(parsed.hostname or "127.0.0.1", port, self.max_idle, tls, self.connect_s, self.idle_s)
        return origin, parsed.path.rstrip("/").encode()

    def retain(self, urls: Iterable[str]) -> list[str]:
        """Drop the origins of every URL not in ``urls`` (replicas that left); returns the dropped URLs."""
        keep = set(urls)
        gone = [url for url in self.origins if url not in keep]
        for url in gone:
            self.origins.pop(url)[0].close()
        return gone

    def close(self) -> None:
        for o, _ in self.origins.values():
            o.close()
