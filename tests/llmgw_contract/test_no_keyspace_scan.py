"""The registry read and the presence beat cost O(models + replicas) and O(gateways), whatever else Redis
holds: against a real Redis with many unrelated keys, the commands they ran (INFO commandstats) include no
SCAN or KEYS, and one registry hash read per model."""

from __future__ import annotations

import uuid

import redis.asyncio as aioredis

from gateway.admission.presence import Presence
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord, publish, read_registry

UNRELATED = 20_000


async def commands(redis: aioredis.Redis) -> dict[str, int]:
    stats = await redis.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


async def test_registry_read_and_presence_beat_never_scan(redis_url: str) -> None:
    redis = aioredis.Redis.from_url(redis_url)
    keys = RedisKeys(f"ns{uuid.uuid4().hex[:8]}")
    try:
        for start in range(0, UNRELATED, 5000):  # stored Responses records and the like
            await redis.mset({keys.response("m", f"r{i}"): b"x" for i in range(start, start + 5000)})
        records = [ReplicaRecord(id=f"{m}-{i}", model=m, url="http://x") for m in "ab" for i in range(3)]
        for rec in records:
            assert await publish(redis, keys, rec, 30)
        gateways = [Presence(redis, keys, f"g{i}", 30) for i in range(4)]
        await read_registry(redis, keys)  # scripts loaded before the count starts
        await gateways[0].beat()
        await redis.config_resetstat()
        got = await read_registry(redis, keys)
        beats = [await g.beat() for g in gateways]
        called = await commands(redis)
    finally:
        await redis.aclose()
    assert sorted(r.id for r in got) == sorted(r.id for r in records)
    assert beats[-1] == 4
    assert "scan" not in called and "keys" not in called, called
    assert called["hgetall"] == 2  # one read of each model's registry hash
    assert called["evalsha"] == 1 + 2 + len(gateways)  # the model list, two models, four beats
