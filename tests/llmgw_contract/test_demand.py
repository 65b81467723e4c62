"""One model's demand, read in one script from a real Redis, from entries the real admission scripts wrote
for several gateways: queued + in flight summed over them, the moment a request first waited with nothing
running, and no keyspace scan."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from gateway.admission.base import Ticket
from gateway.admission.queue_scripts import Acquired, QueueScripts, ticket_id
from gateway.admission.redis_wire import PipelinedRedis
from llmgw_contract.demand import read_demand
from llmgw_contract.redis_keys import RedisKeys
from testing.procs import start_redis

MODEL = "m"


@pytest.fixture
def keys() -> RedisKeys:
    return RedisKeys(f"dm{uuid.uuid4().hex[:10]}")


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


def gateway(redis: aioredis.Redis, keys: RedisKeys) -> QueueScripts:
    return QueueScripts(PipelinedRedis.like(redis, 2.0), keys, ttl_ms=30_000)


def ticket(rid: str, model: str = MODEL) -> Ticket:
    return Ticket(rid, model, "t", 0, 10, 30.0, 100)


async def test_demand_sums_every_gateways_waiters_and_leases(redis: aioredis.Redis, keys: RedisKeys) -> None:
    gws = {name: gateway(redis, keys) for name in ("gw-a", "gw-b")}
    for name, scripts in gws.items():
        for i in range(3):  # capacity 2 over both gateways: 2 granted, the rest queued
            await scripts.acquire(ticket(f"{name}-{i}"), ticket_id(name, f"r{i}"), 2)
    await gws["gw-a"].acquire(ticket("other", "other"), ticket_id("gw-a", "o"), 0)
    demand = await read_demand(redis, keys, MODEL)
    assert (demand.queued, demand.running, demand.total) == (4, 2, 6)
    assert not demand.waiting_at_zero  # requests run: the model has a replica
    assert (await read_demand(redis, keys, "other")).total == 1


async def test_the_first_wait_at_zero_is_stamped_once_and_dropped_when_it_ends(
    redis: aioredis.Redis, keys: RedisKeys
) -> None:
    assert (await read_demand(redis, keys, MODEL)).waiting_since_ms == 0
    a, b = gateway(redis, keys), gateway(redis, keys)
    assert (await a.acquire(ticket("1"), ticket_id("gw-a", "1"), 0))[0] is Acquired.QUEUED
    first = await read_demand(redis, keys, MODEL)
    assert first.waiting_at_zero and first.queued == 1 and first.total == 1
    assert first.now_ms - 1000 <= first.waiting_since_ms <= first.now_ms
    await b.acquire(ticket("2"), ticket_id("gw-b", "2"), 0)
    second = await read_demand(redis, keys, MODEL)
    assert second.waiting_since_ms == first.waiting_since_ms and second.queued == 2
    await a.leave(MODEL, ticket_id("gw-a", "1"), keep=False, capacity=0)
    await b.leave(MODEL, ticket_id("gw-b", "2"), keep=False, capacity=0)
    gone = await read_demand(redis, keys, MODEL)
    assert (gone.total, gone.waiting_since_ms) == (0, 0)
    assert not await redis.exists(keys.waiting_since(MODEL))


async def test_shared_inflight_counts_where_admission_is_off_without_double_counting(
    redis: aioredis.Redis, keys: RedisKeys
) -> None:
    secs, micros = await redis.time()
    now_ms = int(secs) * 1000 + int(micros) // 1000
    await redis.hset(keys.inflight(MODEL), "gw-a", f'{now_ms} {{"m-0": 2, "m-1": 1}}')
    await redis.hset(keys.inflight(MODEL), "gw-b", f'{now_ms} {{"m-0": 1}}')
    await redis.hset(keys.inflight(MODEL), "gw-old", f'{now_ms - 60_000} {{"m-0": 9}}')
    await redis.hset(keys.inflight(MODEL), "gw-bad", "not a share")
    demand = await read_demand(redis, keys, MODEL)
    assert (demand.shared_inflight, demand.in_flight, demand.total) == (4, 4, 4)
    await gateway(redis, keys).acquire(ticket("x"), ticket_id("gw-a", "x"), 8)
    assert (await read_demand(redis, keys, MODEL)).in_flight == 4  # the same requests, counted once


@pytest.fixture
async def own_redis(tmp_path: Path) -> AsyncIterator[aioredis.Redis]:
    """A redis-server of this test's own: its command counts are this test's alone (on the shared one,
    another test's leftover loop once added an EVALSHA inside the window)."""
    proc = start_redis(tmp_path)
    client = aioredis.Redis.from_url(f"redis://127.0.0.1:{proc.port}/0")
    try:
        yield client
    finally:
        await client.aclose()
        proc.stop()


async def test_the_demand_read_never_scans_the_keyspace(own_redis: aioredis.Redis, keys: RedisKeys) -> None:
    redis = own_redis
    await redis.mset({keys.response(MODEL, f"r{i}"): b"x" for i in range(2000)})
    await read_demand(redis, keys, MODEL)
    await redis.config_resetstat()
    await read_demand(redis, keys, MODEL)
    stats = await redis.info("commandstats")
    called = {name.removeprefix("cmdstat_") for name in stats}
    assert "scan" not in called and "keys" not in called, called
    assert int(stats["cmdstat_evalsha"]["calls"]) == 1
