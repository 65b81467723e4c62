"""A model's measured cold starts in a real Redis: the first measurement as it is, then a moving average
per device kind; the estimate read back is the kind measured last; an unreachable Redis loses a
measurement and gives no estimate, raising nothing."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from llmgw_contract.cold_starts import folded, read_cold_start, record_cold_start
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


def test_an_unprepared_start_is_the_estimate_only_until_a_prepared_one_is_measured() -> None:
    """A start whose files the supervisor had not read ahead (its page cache cold: the first on a host)
    is kept while nothing else is known, replaced (not averaged) by the first prepared start, and never
    moves an estimate of prepared starts."""
    assert folded(None, False, 33.0, prepared=False) == (33.0, True)
    assert folded(33.0, True, 40.0, prepared=False) == (36.5, True)  # only unprepared starts known
    assert folded(36.5, True, 27.0, prepared=True) == (27.0, False)  # replaced
    assert folded(27.0, False, 29.0, prepared=True) == (28.0, False)  # averaged, as before
    assert folded(28.0, False, 45.0, prepared=False) == (28.0, False)  # kept


async def test_the_mark_of_an_unprepared_estimate_is_kept_in_redis(
    redis: aioredis.Redis, keys: RedisKeys
) -> None:
    await record_cold_start(redis, keys, "m", "cpu", 33.0, prepared=False)
    assert await read_cold_start(redis, keys, "m") == 33.0  # the only estimate there is
    assert await record_cold_start(redis, keys, "m", "cpu", 27.0) == 27.0
    assert await record_cold_start(redis, keys, "m", "cpu", 29.0) == 28.0
    assert await record_cold_start(redis, keys, "m", "cpu", 50.0, prepared=False) == 28.0
    assert await read_cold_start(redis, keys, "m") == 28.0
