"""The registry contract on a real Redis: publish with a TTL, read back, remove; junk is skipped."""

from __future__ import annotations

import uuid

import redis.asyncio as aioredis

from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import (
    RegistryTiming,
    RegistryWriter,
    ReplicaRecord,
    ReplicaState,
    new_instance_id,
    read_model,
    read_registry,
)


def record(rid: str, state: ReplicaState = ReplicaState.READY) -> ReplicaRecord:
    return ReplicaRecord(id=rid, model="m", url=f"http://{rid}", state=state, instance=new_instance_id())


async def test_publish_read_remove_round_trip(redis_url: str) -> None:
    redis = aioredis.Redis.from_url(redis_url)
    keys = RedisKeys(f"t{uuid.uuid4().hex[:8]}")
    writer = RegistryWriter(redis, keys, RegistryTiming(ttl_s=5))
    a, b = record("a"), record("b", ReplicaState.DRAINING)
    assert await writer.publish(a) and await writer.publish(b)
    assert 0 < (await read_model(redis, keys, "m"))["a"][1] <= 5000
    assert sorted(await read_registry(redis, keys), key=lambda r: r.id) == [a, b]
    await writer.remove(a)
    assert await read_registry(redis, keys) == [b]
    await redis.hset(keys.registry("m"), "junk", "99999999999999 not json")
    assert await read_registry(redis, keys) == [b]
    await redis.aclose()


def test_instance_ids_differ_per_start_and_states_say_what_routes() -> None:
    assert new_instance_id() != new_instance_id()
    routable = {s for s in ReplicaState if record("x", s).routable}
    assert routable == {ReplicaState.READY, ReplicaState.REPLACING}


def test_timing_heartbeats_three_times_per_ttl() -> None:
    assert RegistryTiming(ttl_s=9).heartbeat_s == 3
