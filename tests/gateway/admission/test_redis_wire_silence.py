"""The lean pipelined connection notices a connection that went silent (no FIN, no RST), through a real
loopback proxy that black-holes it: the call times out, the connection is closed with every call pending on
it failed, and the next call opens a fresh one. Pending calls are bounded; TCP keepalive is on."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.admission.base import AdmissionUnavailable, Ticket
from gateway.admission.fallback import FallbackAdmission
from gateway.admission.local import LocalAdmission
from gateway.admission.presence import Presence
from gateway.admission.redis_queue import RedisAdmission, RedisLease
from gateway.admission.redis_wire import Endpoint, PipelinedRedis
from gateway.metrics import GatewayMetrics
from gateway.redis_clients import blocking_client, fast_client
from llmgw_contract.redis_keys import RedisKeys
from testing.blackhole import BlackHoleProxy
from testing.poll import until
from testing.procs import Proc

TIMEOUT_S = 0.3


@pytest.fixture
async def proxy(redis_server: Proc) -> AsyncIterator[BlackHoleProxy]:
    proxy = await BlackHoleProxy(redis_server.port).start()
    yield proxy
    await proxy.close()


async def test_a_silent_connection_is_closed_and_replaced(proxy: BlackHoleProxy) -> None:
    lean = PipelinedRedis(Endpoint("127.0.0.1", proxy.port), TIMEOUT_S)
    assert await lean.call("PING") == "PONG"
    proxy.black_hole()
    calls = [asyncio.ensure_future(lean.call("PING")) for _ in range(5)]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(o, (TimeoutError, ConnectionError)) for o in outcomes), outcomes
    assert not lean.healthy
    started = time.monotonic()
    for _ in range(25):  # each one on the fresh connection, none waits out a timeout
        assert await lean.call("PING") == "PONG"
    assert time.monotonic() - started < 25 * TIMEOUT_S
    assert proxy.accepted == 2 and lean.healthy
    lean.close()


async def test_pending_calls_are_bounded(proxy: BlackHoleProxy) -> None:
    lean = PipelinedRedis(Endpoint("127.0.0.1", proxy.port), 5.0, max_pending=4)
    await lean.connect()
    proxy.black_hole()
    calls = [asyncio.ensure_future(lean.call("PING")) for _ in range(4)]
    await asyncio.sleep(0)
    with pytest.raises(RedisError, match="pending"):
        await lean.call("PING")  # refused at once, not queued behind a silent connection
    assert not any(c.done() for c in calls)
    lean.close()
    await asyncio.gather(*calls, return_exceptions=True)


async def test_the_earliest_deadline_ends_a_silent_connection_whatever_the_order(
    proxy: BlackHoleProxy,
) -> None:
    """The connection's one alarm follows its earliest deadline: a short call sent after a long one
    times out at its own deadline (the long one then fails with the closed connection), and a call
    whose deadline is still ahead keeps the connection while replies come."""
    lean = PipelinedRedis(Endpoint("127.0.0.1", proxy.port), 5.0)
    await lean.connect()
    assert await asyncio.gather(*(lean.call("PING") for _ in range(3))) == ["PONG"] * 3  # alarms left
    proxy.black_hole()
    long, short = lean.call_nowait(["PING"], 5.0), lean.call_nowait(["PING"], TIMEOUT_S)
    assert long is not None and short is not None
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await short
    assert time.monotonic() - started < 5.0 / 2
    with pytest.raises(ConnectionError):
        await long
    assert not lean.healthy
    lean.close()


async def test_tcp_keepalive_is_on(redis_server: Proc) -> None:
    lean = PipelinedRedis(Endpoint("127.0.0.1", redis_server.port), 2.0)
    await lean.connect()
    sock = lean.socket()
    assert sock is not None and sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    lean.close()


async def test_admission_recovers_on_a_fresh_connection(proxy: BlackHoleProxy) -> None:
    url = f"redis://127.0.0.1:{proxy.port}/0"
    adm = RedisAdmission(
        fast_client(url, TIMEOUT_S), blocking_client(url, TIMEOUT_S, 8), RedisKeys("silence"), "g", 30.0,
        io_timeout_s=TIMEOUT_S,
    )  # fmt: skip
    await adm.start()
    t = Ticket("r", "m", "t", 0, 1, 5.0, 10)
    lease, _ = await adm.acquire(t, 4)
    await lease.release()
    await adm.drain()
    proxy.black_hole()
    with pytest.raises(AdmissionUnavailable):
        await adm.acquire(t, 4)  # the call in flight on the silent connection
    slow = 0
    for _ in range(25):
        started = time.monotonic()
        lease, _ = await adm.acquire(t, 4)
        await lease.release()
        slow += time.monotonic() - started >= TIMEOUT_S
    assert slow == 0
    await adm.stop()


async def test_degraded_while_silent_then_shared_again_without_flapping(proxy: BlackHoleProxy) -> None:
    url, keys = f"redis://127.0.0.1:{proxy.port}/0", RedisKeys("silence-fb")
    redis = fast_client(url, TIMEOUT_S)
    shared = RedisAdmission(
        redis, blocking_client(url, TIMEOUT_S, 8), keys, "g", 30.0, io_timeout_s=TIMEOUT_S
    )
    presence = Presence(redis, keys, "g", 1.0)
    adm = FallbackAdmission(shared, LocalAdmission(), presence, GatewayMetrics(), probe_s=0.1)
    await adm.start()
    try:
        assert not adm.degraded
        proxy.black_hole()
        await until(lambda: adm.degraded, 5, "degraded while the connection is silent")
        await until(lambda: not adm.degraded, 5, "shared again on a fresh connection")
        for i in range(25):
            lease, _ = await adm.acquire(Ticket(f"r{i}", "m", "t", 0, 1, 5.0, 10), 4)
            assert isinstance(lease, RedisLease) and not adm.degraded
            await lease.release()
    finally:
        await adm.stop()


async def test_a_release_that_failed_is_sent_again_once_redis_answers(
    proxy: BlackHoleProxy, redis_server: Proc
) -> None:
    """A lease released while its connection was silent (or its master dead) is released again by the
    next beat that reaches Redis, not left holding a slot for the rest of its TTL (30 s here)."""
    url = f"redis://127.0.0.1:{proxy.port}/0"
    keys = RedisKeys(f"rel{time.monotonic_ns()}")
    adm = RedisAdmission(
        fast_client(url, TIMEOUT_S), blocking_client(url, TIMEOUT_S, 4), keys, "g1", 30.0,
        io_timeout_s=TIMEOUT_S, beat_s=0.2,
    )  # fmt: skip
    await adm.start()
    try:
        lease, _ = await adm.acquire(Ticket("r1", "m", "t", 0, 1, 5.0, 10), 1)
        proxy.black_hole()
        await lease.release()
        await adm.drain()  # the release timed out on the silent connection
        direct = fast_client(f"redis://127.0.0.1:{redis_server.port}/0", 2.0)
        try:
            assert await direct.zcard(keys.leases("m")) == 1
            started = time.monotonic()
            await until(lambda: zero(direct, keys), 5.0, "the lease released again")
            assert time.monotonic() - started < 5.0  # a beat or two, far from the 30 s TTL
        finally:
            await direct.aclose()
    finally:
        await adm.stop()


async def zero(redis: aioredis.Redis, keys: RedisKeys) -> bool:
    return int(await redis.zcard(keys.leases("m"))) == 0
