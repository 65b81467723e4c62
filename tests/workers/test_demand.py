"""A model's demand as the supervisor reads it from a real Redis: in-flight counts come from the model's
own hash (one Redis Cluster slot with its queue and leases), so another model's requests do not count;
and the read works on one server and on a Redis Cluster alike (one slot, no keyless command)."""

from __future__ import annotations

import uuid

import pytest
import redis.asyncio as aioredis

from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from tests.conftest import Topologies
from workers.ondemand.demand import requested


@pytest.fixture(params=["single", "cluster"])
def url(request: pytest.FixtureRequest, topologies: Topologies) -> str:
    return topologies.get(str(request.param)).url


async def now_ms(redis: aioredis.Redis, key: str) -> int:
    """Redis' clock on the node that holds ``key``."""
    secs, micros = await redis.eval("return redis.call('TIME')", 1, key)
    return int(secs) * 1000 + int(micros) // 1000


async def test_in_flight_requests_count_for_their_own_model_only(url: str) -> None:
    redis = connect(url)
    keys = RedisKeys(f"dem{uuid.uuid4().hex[:8]}")
    try:
        stamp = await now_ms(redis, keys.inflight("busy"))
        await redis.hset(keys.inflight("busy"), "gw-1", f'{stamp} {{"busy-0": 2}}')
        assert await requested(redis, keys, "busy", ["busy-0"])
        assert not await requested(redis, keys, "idle", ["busy-0"])
    finally:
        await redis.aclose()


async def test_a_wake_request_is_read_as_demand(url: str) -> None:
    """The gateway's ``SET NX`` on the wake request is what the activator's tick acts on."""
    redis = connect(url)
    keys = RedisKeys(f"dem{uuid.uuid4().hex[:8]}")
    try:
        assert not await requested(redis, keys, "asleep")
        await redis.set(keys.wake_request("asleep"), "gw-1", nx=True, px=10_000)
        assert await requested(redis, keys, "asleep")
    finally:
        await redis.aclose()
