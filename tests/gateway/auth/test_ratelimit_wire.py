"""A key's rate-limit scripts run over the lean pipelined client (gateway/admission/redis_wire.py), not
redis-py: after a charge and a refund, the only redis-py connection on a redis-server of the test's own
is the test's (redis-py 8 speaks RESP3 after HELLO 3; the lean client RESP2, which CLIENT LIST shows)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from gateway.admission.base import Ticket
from gateway.admission.redis_queue import RedisAdmission
from gateway.auth.ratelimit import RateLimiter
from llmgw_contract.redis_keys import RedisKeys
from testing.poll import until
from testing.procs import Proc, start_redis


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Proc]:
    proc = start_redis(tmp_path / "limits")
    yield proc
    proc.stop()


async def test_charge_and_refund_go_over_the_lean_client(server: Proc) -> None:
    url = f"redis://127.0.0.1:{server.port}/0"
    limits, probe = aioredis.Redis.from_url(url), aioredis.Redis.from_url(url)
    limiter = RateLimiter(limits, RedisKeys("t"))
    try:
        decision = await limiter.charge("k1", 10, 100, 30)
        assert decision.allowed and decision.requests_used == 1 and decision.tokens_used == 30
        assert await limiter.refund("k1", decision.window, 20) == 20
        me = await probe.client_id()
        clients = [c for c in await probe.client_list() if int(c["id"]) != me]
        assert clients and all(c["resp"] == "2" for c in clients), clients
    finally:
        await limiter.aclose()
        await probe.aclose()


async def test_a_release_and_a_refund_of_one_tick_leave_in_one_write(server: Proc) -> None:
    """The limits share the admission queue's pipelined connection (the gateway wires them so: one
    server): a request's settle, its release and its refund, goes out in one write."""
    url, keys = f"redis://127.0.0.1:{server.port}/0", RedisKeys("t")
    admission = RedisAdmission(aioredis.Redis.from_url(url), aioredis.Redis.from_url(url), keys, "gw", 15.0)
    limiter = RateLimiter(aioredis.Redis.from_url(url), keys, lean=admission.lean)
    probe = aioredis.Redis.from_url(url)
    try:
        first, _ = await admission.acquire(Ticket("r0", "m", "acme", 0, 1, 5.0, 10), 4)
        await admission.scripts.release("m", first.id, 4)  # the scripts loaded (no NOSCRIPT below)
        lease, _ = await admission.acquire(Ticket("r1", "m", "acme", 0, 1, 5.0, 10), 4)
        decision = await limiter.charge("k1", 10, 100, 30)
        assert await limiter.refund("k1", decision.window, 1) == 1
        proto = admission.lean._proto
        assert proto is not None and proto.transport is not None
        written: list[bytes] = []
        write = proto.transport.write

        def counted(data: bytes | bytearray | memoryview) -> None:
            written.append(bytes(data))
            write(data)

        proto.transport.write = counted  # type: ignore[method-assign]  # counted, then written
        await lease.release()
        limiter.refund_nowait("k1", decision.window, 20)
        await until(lambda: not admission._releases and not limiter._sent, 5.0, "both answered")
        assert len(written) == 1 and written[0].count(b"EVALSHA") == 2
        assert await probe.zcard(keys.leases("m")) == 0
        assert int(await probe.hget(keys.rate("k1"), f"tpm:{decision.window}") or 0) == 9
    finally:
        await limiter.aclose()  # leaves the shared connection open: the queue owns it
        assert admission.lean.healthy
        await admission.stop()
        await probe.aclose()
