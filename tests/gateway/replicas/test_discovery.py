"""Discovery drops what belonged to a replica that left the registry: its metric series, its connections."""

from __future__ import annotations

import redis.asyncio as aioredis

from gateway.metrics import GatewayMetrics
from gateway.replicas.discovery import Departures, Discovery
from gateway.replicas.table import ReplicaTable
from gateway.upstream.http1 import ConnectionPool
from llmgw_contract.fleet import parse_fleet
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord
from testing.gateway import fleet_yaml

FLEET = parse_fleet(fleet_yaml([{"name": "m", "source": {"path": "/x"}}]))


def record(rid: str) -> ReplicaRecord:
    return ReplicaRecord(id=rid, model="m", url=f"http://127.0.0.1:1/{rid}")


async def test_replicas_that_leave_take_their_series_and_pools_with_them() -> None:
    metrics, upstream, table = GatewayMetrics(), ConnectionPool(), ReplicaTable(["m"])
    redis = aioredis.Redis.from_url("redis://127.0.0.1:1/0")  # never contacted: apply() reads no Redis
    discovery = Discovery(redis, RedisKeys("unused"), FLEET, table, metrics, Departures(upstream.retain))
    discovery.apply([record("a"), record("b")])
    for ep in table.endpoints():
        metrics.inflight.labels("m", ep.id).set(1)
        metrics.ejections.labels("m", ep.id).inc()
        upstream.origin(ep.url)
    gone_origin, _ = upstream.origin(record("a").url)

    discovery.apply([record("b")])

    text = metrics.render().decode()
    assert 'replica="a"' not in text
    assert 'llmgw_inflight_requests{model="m",replica="b"} 1.0' in text
    assert set(upstream.origins) == {record("b").url}
    assert gone_origin.retired
    await redis.aclose()
