"""In-flight counts shared through a real Redis: each gateway sees the others' requests on each replica."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from gateway.replicas.inflight import InflightShare, add_counts, own_counts
from gateway.replicas.table import Endpoint, ReplicaTable
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord
from testing.procs import free_port, start_redis

Make = Callable[..., InflightShare]
IDS = ("m-0", "m-1")


def table() -> ReplicaTable:
    t = ReplicaTable(["m"])
    t.sync("m", [ReplicaRecord(id=i, model="m", url=f"http://{i}") for i in IDS])
    return t


def endpoint(share: InflightShare, rid: str) -> Endpoint:
    return next(e for e in share.table.endpoints() if e.id == rid)


@pytest.fixture
async def make(redis_url: str) -> AsyncIterator[Make]:
    keys = RedisKeys(f"t{uuid.uuid4().hex[:10]}")
    clients: list[aioredis.Redis] = []

    def build(gateway_id: str, max_age_s: float = 2.0, url: str = redis_url) -> InflightShare:
        client = aioredis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
        clients.append(client)
        return InflightShare(client, keys, gateway_id, table(), max_age_s)

    yield build
    for c in clients:
        await c.aclose()


async def test_each_gateway_sees_the_others_counts_not_its_own(make: Make) -> None:
    g1, g2, g3 = make("g1"), make("g2"), make("g3")
    endpoint(g1, "m-0").inflight, endpoint(g1, "m-1").inflight = 3, 1
    endpoint(g2, "m-0").inflight = 2
    for g in (g1, g2, g3, g1):
        await g.tick()
    assert [endpoint(g3, i).others for i in IDS] == [5, 1]
    assert [endpoint(g1, i).others for i in IDS] == [2, 0]
    assert [endpoint(g2, i).others for i in IDS] == [3, 1]
    assert endpoint(g2, "m-0").load == 2 + 3  # nothing waiting in vLLM


async def test_a_gateway_that_stops_publishing_is_forgotten(make: Make) -> None:
    alive, dead = make("alive", max_age_s=0.3), make("dead", max_age_s=0.3)
    endpoint(dead, "m-0").inflight = 4
    await dead.tick()
    await alive.tick()
    assert endpoint(alive, "m-0").others == 4
    await asyncio.sleep(0.4)  # longer than max age, measured on Redis's clock
    await alive.tick()
    assert endpoint(alive, "m-0").others == 0


async def test_leave_removes_the_field_at_once(make: Make) -> None:
    a, b = make("a"), make("b")
    endpoint(b, "m-1").inflight = 2
    await b.tick()
    await b.leave()
    await a.tick()
    assert endpoint(a, "m-1").others == 0


async def test_without_redis_the_load_falls_back_to_the_scraped_gauges(make: Make, tmp_path: Path) -> None:
    proc = start_redis(tmp_path / "redis", free_port())
    share = make("g", url=f"redis://127.0.0.1:{proc.port}/0")
    await share.tick()
    ep = endpoint(share, "m-0")
    assert ep.shared_others == 0
    proc.stop()
    ep.inflight, ep.running, ep.waiting, ep.inflight_at_scrape = 1, 4, 0, 1
    await share.tick()
    assert ep.shared_others is None and share.connected is False
    assert (ep.others, ep.load) == (3, 4)  # 4 running as scraped, 1 of them ours


def test_counts_encoding() -> None:
    t = table()
    t.endpoints()[1].inflight = 2
    assert own_counts(t) == {"m-1": 2}
    blobs = [b'{"m-0":1,"m-1":2}', b'{"m-0":3}', b"not json", b"[1]", b'{"m-1":-5}']
    assert add_counts(blobs) == Counter({"m-0": 4, "m-1": 2})
