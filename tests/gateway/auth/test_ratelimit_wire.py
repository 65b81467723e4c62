"""A key's rate-limit scripts run over the lean pipelined client (gateway/admission/redis_wire.py), not
redis-py: after a charge and a refund, the only redis-py connection on a redis-server of the test's own
is the test's (redis-py 8 speaks RESP3 after HELLO 3; the lean client RESP2, which CLIENT LIST shows)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from gateway.auth.ratelimit import RateLimiter
from llmgw_contract.redis_keys import RedisKeys
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
