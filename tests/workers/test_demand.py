"""A model's demand as the supervisor reads it from a real Redis: in-flight counts come from the model's
own hash (one Redis Cluster slot with its queue and leases), so another model's requests do not count."""

from __future__ import annotations

import uuid

import redis.asyncio as aioredis

from contract.redis_keys import RedisKeys
from workers.ondemand.demand import requested


async def test_in_flight_requests_count_for_their_own_model_only(redis_url: str) -> None:
    redis = aioredis.Redis.from_url(redis_url)
    keys = RedisKeys(f"dem{uuid.uuid4().hex[:8]}")
    try:
        secs, micros = await redis.time()
        now_ms = int(secs) * 1000 + int(micros) // 1000
        await redis.hset(keys.inflight("busy"), "gw-1", f'{now_ms} {{"busy-0": 2}}')
        assert await requested(redis, keys, "busy", ["busy-0"])
        assert not await requested(redis, keys, "idle", ["busy-0"])
    finally:
        await redis.aclose()
