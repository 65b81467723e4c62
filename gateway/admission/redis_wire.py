"""A lean, pipelined Redis connection for the admission scripts on the hot path.

Every admitted request runs two scripts (acquire, release). Through redis-py each call cost more
CPU than the rest of the request path together (docs/decisions/0010-own-upstream-client.md); here one
carries every call of the gateway, pipelined: the commands of one event-loop tick leave in one write
and replies are matched to callers in order. A call's deadline is one timer (not a timeout context),
and a caller that need not wait (a release) gets the reply's future without a task. Only what
EVALSHA needs is spoken: RESP2 integers, bulk strings, arrays, simple strings and errors.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import ssl
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import SSLConnection
from redis.exceptions import RedisError

Reply = int | bytes | str | list[Any] | None


class RedisReplyError(RedisError):
    """Redis answered the command with an error."""


def encode(parts: list[bytes | str | int | float]) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        b = p if isinstance(p, bytes) else str(p).encode()
        out += [b"$%d\r\n" % len(b), b, b"\r\n"]
    return b"".join(out)


class _Parser:
    """Incremental RESP2 parser: feed bytes, take complete replies."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> None:
        self.buf += data

    def replies(self) -> list[Reply | RedisReplyError]:
        out = []
        while self.buf:
            parsed = self._parse(0)
            if parsed is None:
                break
            value, end = parsed
            del self.buf[:end]
            out.append(value)
        return out

    def _line(self, at: int) -> tuple[bytes, int] | None:
        end = self.buf.find(b"\r\n", at)
        return None if end < 0 else (bytes(self.buf[at + 1 : end]), end + 2)

    def _parse(self, at: int) -> tuple[Any, int] | None:
        line = self._line(at)
        if line is None:
            return None
        head, nxt = line
        kind = self.buf[at : at + 1]
        if kind == b":":
            return int(head), nxt
        if kind == b"+":
            return head.decode(), nxt
        if kind == b"-":
            return RedisReplyError(head.decode()), nxt
        if kind == b"$":
            return self._bulk(int(head), nxt)
        if kind == b"*":
            return self._array(int(head), nxt)
        raise RedisReplyError(f"unexpected reply type {kind!r}")

    def _bulk(self, size: int, at: int) -> tuple[bytes | None, int] | None:
        if size < 0:
            return None, at
        if len(self.buf) < at + size + 2:
            return None
        return bytes(self.buf[at : at + size]), at + size + 2

    def _array(self, count: int, at: int) -> tuple[list[Any] | None, int] | None:
        if count < 0:
            return None, at
        items = []
        for _ in range(count):
            parsed = self._parse(at)
            if parsed is None:
                return None
            item, at = parsed
            items.append(item)
        return items, at


def expire(fut: asyncio.Future[Reply], timeout_s: float) -> None:
    """A call's deadline passed: its caller gets TimeoutError (a late reply is skipped)."""
    if not fut.done():
        fut.set_exception(TimeoutError(f"no reply from Redis within {timeout_s:g} s"))


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = _Parser()
        self.pending: collections.deque[tuple[asyncio.Future[Reply], asyncio.TimerHandle | None]] = (
            collections.deque()
        )
        self.transport: asyncio.Transport | None = None
        self.lost: Exception | None = None
        self.out: list[bytes] = []  # the commands of this tick, written together by flush()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(
        self, loop: asyncio.AbstractEventLoop, command: bytes, timeout_s: float
    ) -> asyncio.Future[Reply]:
        """Queue ``command`` for this tick's write; its reply's future fails with TimeoutError
        past ``timeout_s``."""
        fut: asyncio.Future[Reply] = loop.create_future()
        self.pending.append((fut, loop.call_later(timeout_s, expire, fut, timeout_s)))
        if not self.out:
            loop.call_soon(self.flush)
        self.out.append(command)
        return fut

    def flush(self) -> None:
        out, self.out = self.out, []
        if out and self.transport is not None and self.lost is None:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def data_received(self, data: bytes) -> None:
        self.parser.feed(data)
        for reply in self.parser.replies():
            fut, timer = self.pending.popleft()
            if timer is not None:
                timer.cancel()
            if fut.done():
                continue
            if isinstance(reply, RedisReplyError):
                fut.set_exception(reply)
            else:
                fut.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = ConnectionResetError("the Redis connection was lost")
        while self.pending:
            fut, timer = self.pending.popleft()
            if timer is not None:
                timer.cancel()
            if not fut.done():
                fut.set_exception(self.lost)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to connect: the server, its database, ACL credentials and TLS (``rediss://``)."""

    host: str = "127.0.0.1"
    port: int = 6379
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: ssl.SSLContext | None = None

    @classmethod
    def of(cls, client: aioredis.Redis) -> Endpoint:
        """The endpoint a redis-py client connects to, TLS context included (built by redis-py itself)."""
        pool = client.connection_pool
        kw = pool.connection_kwargs
        tls = None
        if issubclass(pool.connection_class, SSLConnection):
            tls = pool.connection_class(**kw).ssl_context.get()
        return cls(
            kw.get("host", "127.0.0.1"),
            int(kw.get("port", 6379)),
            int(kw.get("db", 0)),
            kw.get("username"),
            kw.get("password"),
            tls,
        )

    def auth(self) -> list[bytes | str | int | float] | None:
        """The AUTH command for these credentials (``AUTH user pass`` with an ACL user), or None."""
        if not self.password:
            return None
        return ["AUTH", self.username, self.password] if self.username else ["AUTH", self.password]


class PipelinedRedis:
    """One lazily (re)opened connection; calls are pipelined and bounded by a timeout."""

    def __init__(self, endpoint: Endpoint, timeout_s: float) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._proto: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None

    @classmethod
    def like(cls, client: aioredis.Redis, timeout_s: float) -> PipelinedRedis:
        """A lean connection to the same server, database, credentials and TLS as a redis-py client."""
        return cls(Endpoint.of(client), timeout_s)

    async def _connection(self) -> _Protocol:
        proto = self._proto
        if proto is not None and proto.lost is None:
            return proto
        self._connecting = self._connecting or asyncio.Lock()
        async with self._connecting:
            if self._proto is None or self._proto.lost is not None:
                self._proto = await self._open()
            return self._proto

    async def _open(self) -> _Protocol:
        e, loop = self.endpoint, asyncio.get_running_loop()
        server_hostname = e.host if e.tls is not None else None
        _, proto = await loop.create_connection(
            _Protocol, e.host, e.port, ssl=e.tls, server_hostname=server_hostname
        )
        try:
            auth = e.auth()
            if auth is not None:
                await self._send(proto, auth)
            if e.db:
                await self._send(proto, ["SELECT", e.db])
        except BaseException:
            if proto.transport is not None:
                proto.transport.close()
            raise
        return proto

    async def _send(self, proto: _Protocol, parts: list[bytes | str | int | float]) -> Reply:
        assert proto.transport is not None
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        proto.pending.append((fut, None))
        proto.transport.write(encode(parts))
        return await fut

    async def connect(self) -> None:
        """Open the connection now (within the timeout) rather than on the first call."""
        async with asyncio.timeout(self.timeout_s):
            await self._connection()

    async def call(self, *parts: bytes | str | int | float) -> Reply:
        proto = self._proto
        if proto is None or proto.lost is not None:
            async with asyncio.timeout(self.timeout_s):
                proto = await self._connection()
        return await proto.send(asyncio.get_running_loop(), encode(list(parts)), self.timeout_s)

    def call_nowait(
        self, parts: list[bytes | str | int | float], timeout_s: float | None = None
    ) -> asyncio.Future[Reply] | None:
        """The reply's future of a call sent without waiting (no task), failing with TimeoutError past
        ``timeout_s`` (the connection's own by default); None while no connection is open (then use
        :meth:`call`)."""
        proto = self._proto
        if proto is None or proto.lost is not None:
            return None
        return proto.send(asyncio.get_running_loop(), encode(parts), timeout_s or self.timeout_s)

    def close(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()


class LeanScript:
    """A Lua script called by EVALSHA (loaded with EVAL the first time Redis lacks it)."""

    def __init__(self, client: PipelinedRedis, source: str) -> None:
        self.client, self.source = client, source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def __call__(self, keys: list[str], args: list[str | int | float]) -> Any:
        try:
            return await self.client.call("EVALSHA", self.sha, len(keys), *keys, *args)
        except RedisReplyError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        return await self.client.call("EVAL", self.source, len(keys), *keys, *args)

    def nowait(
        self, keys: list[str], args: list[str | int | float], timeout_s: float | None = None
    ) -> asyncio.Future[Reply] | None:
        """EVALSHA sent without waiting: the reply's future (a NOSCRIPT error in it means: use the
        awaited call, which loads the script), or None while no connection is open."""
        return self.client.call_nowait(["EVALSHA", self.sha, len(keys), *keys, *args], timeout_s)
