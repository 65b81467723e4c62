"""A lean, pipelined Redis connection for the admission scripts on the hot path.

Every admitted request runs two scripts (acquire, release). Through redis-py each call cost more
CPU than the rest of the request path together (docs/decisions/0010-own-upstream-client.md); here one
carries every call of the gateway, pipelined: the commands of one event-loop tick leave in one write
and replies are matched to callers in order. Deadlines share one alarm per connection (no timer per call),
and a caller that need not wait (a release) gets the reply's future without a task. Only what
EVALSHA needs is spoken: RESP2 integers, bulk strings, arrays, simple strings and errors.

A connection that goes silent (no FIN, no RST: a failed-over address, a dropped NAT entry) is noticed by
the first call that times out: the connection is closed, every call pending on it fails at once, and the
next call opens a fresh one. Calls pending on one connection are bounded; TCP keepalive is on.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import math
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import RedisError

from gateway.admission.redis_endpoint import Endpoint, keepalive, tls_context
from gateway.admission.resp import Head, Parser, Part, RedisReplyError, Reply, encode, head, words

__all__ = [
    "Endpoint",
    "LeanScript",
    "PipelinedRedis",
    "RedisReplyError",
    "Reply",
    "TooManyPending",
    "tls_context",
]

MAX_PENDING = 10_000
ALARM_SLACK_S = 0.001  # a deadline this close when the alarm rings counts as passed (timers are in ms)


class TooManyPending(RedisError):
    """The connection already has its bound of calls waiting for replies."""


class _Protocol(asyncio.Protocol):
    def __init__(self, max_pending: int = MAX_PENDING) -> None:
        self.parser = Parser()
        self.max_pending = max_pending
        # each call's reply future, deadline (loop time) and timeout; one alarm, at the earliest deadline
        self.pending: collections.deque[tuple[asyncio.Future[Reply], float, float]] = collections.deque()
        self.alarm: asyncio.TimerHandle | None = None
        self.alarm_at = math.inf
        self.transport: asyncio.Transport | None = None
        self.lost: Exception | None = None
        self.out: list[bytes] = []  # the commands of this tick, written together by flush()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    @property
    def full(self) -> bool:
        return len(self.pending) >= self.max_pending

    def send(
        self, loop: asyncio.AbstractEventLoop, command: bytes, timeout_s: float
    ) -> asyncio.Future[Reply]:
        """Queue ``command`` for this tick's write; its reply's future fails with TimeoutError past
        ``timeout_s``, and the connection is then closed (see :meth:`expire`). The connection keeps one
        alarm, at its earliest deadline, not a timer per call."""
        if self.full:
            raise TooManyPending(f"{len(self.pending)} Redis calls pending on one connection")
        fut: asyncio.Future[Reply] = loop.create_future()
        deadline = loop.time() + timeout_s
        self.pending.append((fut, deadline, timeout_s))
        if deadline < self.alarm_at:
            self._arm(loop, deadline)
        if not self.out:
            loop.call_soon(self.flush)
        self.out.append(command)
        return fut

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self.alarm is not None:
            self.alarm.cancel()
        self.alarm_at, self.alarm = at, loop.call_at(at, self._deadlines, loop)

    def _deadlines(self, loop: asyncio.AbstractEventLoop) -> None:
        """The alarm: a call still waiting past its deadline expires (a caller gone, its future cancelled,
        does not count); else the alarm is set for the earliest deadline still ahead."""
        self.alarm, self.alarm_at, now = None, math.inf, loop.time() + ALARM_SLACK_S
        nearest = math.inf
        for fut, deadline, timeout_s in self.pending:
            if fut.done():
                continue
            if deadline <= now:
                self.expire(fut, timeout_s)
                return
            nearest = min(nearest, deadline)
        if nearest < math.inf:
            self._arm(loop, nearest)

    def expire(self, fut: asyncio.Future[Reply], timeout_s: float) -> None:
        """A call's deadline passed: its caller gets TimeoutError, and the connection, silent for that
        long, is closed with every other call on it failed (the next call opens a fresh one)."""
        if fut.done():
            return
        fut.set_exception(TimeoutError(f"no reply from Redis within {timeout_s:g} s"))
        self.abort(ConnectionResetError(f"the Redis connection was silent for {timeout_s:g} s; closed"))

    def abort(self, exc: Exception) -> None:
        if self.lost is None:
            self.lost = exc
        self._fail_pending()
        if self.transport is not None:
            self.transport.abort()

    def flush(self) -> None:
        out, self.out = self.out, []
        if out and self.transport is not None and self.lost is None:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def data_received(self, data: bytes) -> None:
        self.parser.feed(data)
        readonly = False
        for reply in self.parser.replies():
            fut = self.pending.popleft()[0]
            if isinstance(reply, RedisReplyError):
                readonly = readonly or str(reply).startswith("READONLY")
                if not fut.done():
                    fut.set_exception(reply)
            elif not fut.done():
                fut.set_result(reply)
        if readonly:  # a master demoted to replica (a Sentinel failover): reconnect, to the master named now
            self.abort(ConnectionResetError("the Redis server is a read-only replica now"))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lost is None:
            self.lost = ConnectionResetError("the Redis connection was lost")
        self._fail_pending()

    def _fail_pending(self) -> None:
        assert self.lost is not None
        if self.alarm is not None:
            self.alarm.cancel()
            self.alarm, self.alarm_at = None, math.inf
        while self.pending:
            fut = self.pending.popleft()[0]
            if not fut.done():
                fut.set_exception(self.lost)


class PipelinedRedis:
    """One lazily (re)opened connection; calls are pipelined and bounded by a timeout, and at most
    ``max_pending`` wait for replies at once."""

    def __init__(
        self,
        endpoint: Endpoint,
        timeout_s: float,
        max_pending: int = MAX_PENDING,
        locate: Callable[[], Awaitable[Endpoint]] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s, self.max_pending = timeout_s, max_pending
        self.locate = locate  # asked before each (re)connect: where the server is now (Sentinel)
        self._proto: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None

    @classmethod
    def like(cls, client: aioredis.Redis, timeout_s: float) -> PipelinedRedis:
        """A lean connection to the same server, database, credentials and TLS as a redis-py client;
        for a Sentinel-managed client, to the master the Sentinels name at each (re)connect."""
        pool = client.connection_pool
        if isinstance(pool, SentinelConnectionPool):
            base = Endpoint.of(client)

            async def master() -> Endpoint:
                host, port = await pool.get_master_address()  # type: ignore[no-untyped-call]
                return dataclasses.replace(base, host=host, port=int(port))

            return cls(base, timeout_s, locate=master)
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
        if self.locate is not None:
            self.endpoint = await self.locate()
        e, loop = self.endpoint, asyncio.get_running_loop()
        if e.path is not None:
            _, proto = await loop.create_unix_connection(lambda: _Protocol(self.max_pending), e.path)
        else:
            server_hostname = e.host if e.tls is not None else None
            _, proto = await loop.create_connection(
                lambda: _Protocol(self.max_pending),
                e.host,
                e.port,
                ssl=e.tls,
                server_hostname=server_hostname,
            )
        try:
            sock = proto.transport.get_extra_info("socket") if proto.transport is not None else None
            if sock is not None and e.path is None:
                keepalive(sock)
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
        proto.pending.append((fut, math.inf, 0.0))  # bounded by the caller's timeout
        proto.transport.write(encode(parts))
        return await fut

    async def connect(self) -> None:
        """Open the connection now (within the timeout) rather than on the first call."""
        async with asyncio.timeout(self.timeout_s):
            await self._connection()

    async def call(self, *parts: Part) -> Reply:
        proto = self._proto
        if proto is None or proto.lost is not None:
            async with asyncio.timeout(self.timeout_s):
                proto = await self._connection()
        return await proto.send(asyncio.get_running_loop(), encode(list(parts)), self.timeout_s)

    async def call_asking(self, *parts: Part) -> Reply:
        """``ASKING`` and the call written together on one connection, opened first if need be: a
        cluster node answers a call for a slot it is importing only right after ``ASKING`` on the same
        connection (an ``-ASK`` redirection), else it sends the call back with ``-MOVED``."""
        async with asyncio.timeout(self.timeout_s):
            proto = await self._connection()
        loop = asyncio.get_running_loop()
        asking = proto.send(loop, encode(["ASKING"]), self.timeout_s)
        reply = proto.send(loop, encode(list(parts)), self.timeout_s)
        _, answer = await asyncio.gather(asking, reply)
        return answer

    def call_nowait(self, parts: list[Part], timeout_s: float | None = None) -> asyncio.Future[Reply] | None:
        """The reply's future of a call sent without waiting (no task), failing with TimeoutError past
        ``timeout_s`` (the connection's own by default); None while no connection is open (then use
        :meth:`call`, which fails when too many calls are pending)."""
        proto = self._proto
        if proto is None or proto.lost is not None or proto.full:
            return None
        return proto.send(asyncio.get_running_loop(), encode(parts), timeout_s or self.timeout_s)

    @property
    def healthy(self) -> bool:
        """True while a connection is open and has not gone silent or been lost."""
        return self._proto is not None and self._proto.lost is None

    def socket(self) -> socket.socket | None:
        """The open connection's socket (None when none is open)."""
        if self._proto is None or self._proto.transport is None:
            return None
        sock: socket.socket | None = self._proto.transport.get_extra_info("socket")
        return sock

    def close(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()


class LeanScript:
    """A Lua script called by EVALSHA (loaded with EVAL the first time Redis lacks it). A call site whose
    keys do not change between calls (a model's, an API key's) encodes them once, with EVALSHA, the sha
    and numkeys, as a :class:`~gateway.admission.resp.Head` (:meth:`bind`), and calls with it
    (:meth:`call_bound`, :meth:`nowait_bound`)."""

    def __init__(self, client: PipelinedRedis, source: str) -> None:
        self.client, self.source = client, source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def bind(self, keys: Sequence[str], more_keys: int = 0) -> Head:
        """EVALSHA, sha, numkeys and ``keys``; ``more_keys``: the keys each call gives first."""
        return head(["EVALSHA", self.sha, len(keys) + more_keys, *keys])

    async def call_bound(self, bound: Head, rest: list[Part]) -> Any:
        """The script with ``bound``'s keys, then ``rest`` (the call's own keys, its arguments)."""
        try:
            return await self.client.call(bound, *rest)
        except RedisReplyError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        return await self.client.call("EVAL", self.source, *words([bound, *rest])[2:])

    def nowait_bound(
        self, bound: Head, rest: list[Part], timeout_s: float | None = None
    ) -> asyncio.Future[Reply] | None:
        """:meth:`call_bound` sent without waiting, as :meth:`nowait`."""
        return self.client.call_nowait([bound, *rest], timeout_s)

    async def __call__(self, keys: list[str], args: list[str | int | float]) -> Any:
        return await self.call_bound(self.bind(keys), [*args])

    def nowait(
        self, keys: list[str], args: list[str | int | float], timeout_s: float | None = None
    ) -> asyncio.Future[Reply] | None:
        """EVALSHA sent without waiting: the reply's future (a NOSCRIPT error in it means: use the
        awaited call, which loads the script), or None while no connection is open."""
        return self.nowait_bound(self.bind(keys), [*args], timeout_s)
