"""A model's measured cold starts in a real Redis: the first measurement as it is, then a moving average
per device kind; the estimate read back is the kind measured last; an unreachable Redis loses a
measurement and gives no estimate, raising nothing."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from llmgw_contract.cold_starts import read_cold_start, record_cold_start
from llmgw_contract.redis_keys import RedisKeys


@pytest.fixture
def keys() -> RedisKeys:
    return RedisKeys(f"cs{uuid.uuid4().hex[:10]}")


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def test_nothing_measured_is_no_estimate(redis: aioredis.Redis, keys: RedisKeys) -> None:
    assert await read_cold_start(redis, keys, "m") is None


async def test_measurements_average_per_device_kind(redis: aioredis.Redis, keys: RedisKeys) -> None:
    await record_cold_start(redis, keys, "m", "gpu", 60.0)
    assert await read_cold_start(redis, keys, "m") == 60.0
    await record_cold_start(redis, keys, "m", "gpu", 40.0)
    assert await read_cold_start(redis, keys, "m") == 50.0
    await record_cold_start(redis, keys, "m", "cpu", 8.0)  # the kind measured last is the estimate
    assert await read_cold_start(redis, keys, "m") == 8.0
    await record_cold_start(redis, keys, "m", "gpu", 50.0)
    assert await read_cold_start(redis, keys, "m") == 50.0
    assert await read_cold_start(redis, keys, "other") is None


async def test_an_unreachable_redis_raises_nothing(keys: RedisKeys) -> None:
    down = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    try:
        await record_cold_start(down, keys, "m", "gpu", 5.0)
        assert await read_cold_start(down, keys, "m") is None
    finally:
        await down.aclose()
