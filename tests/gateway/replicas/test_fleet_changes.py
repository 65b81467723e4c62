"""A gateway while the fleet changes: a Redis restart empties the registry (real redis-server, killed and
replaced by an empty one) and the gateway keeps its replicas; the fleet file changes and the gateway
learns added models and forgets removed ones without a restart (FAKE ENGINE replicas)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from gateway.metrics import GatewayMetrics
from gateway.replicas.discovery import Departures, Discovery
from gateway.replicas.table import ReplicaTable
from gateway.upstream.http1 import ConnectionPool
from llmgw_contract import registry
from llmgw_contract.fleet import parse_fleet
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import free_port, running, start_fake_engine, start_redis

FLEET = "models:\n - name: m\n   source: {path: /m}\n - name: n\n   source: {path: /n}\n"


async def publish(redis: aioredis.Redis, keys: RedisKeys, rec: ReplicaRecord) -> None:
    await registry.publish(redis, keys, rec, 60)


def ids(table: ReplicaTable, model: str) -> list[str]:
    return [e.id for e in table.pool(model).endpoints]


async def refreshed(d: Discovery) -> bool:
    await d.refresh()
    return d.redis_ok


async def test_a_redis_restart_keeps_the_last_known_replicas_until_republished(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    port = free_port()
    server = start_redis(tmp_path / "r1", port)
    redis = aioredis.Redis.from_url(f"redis://127.0.0.1:{port}/0", socket_timeout=2.0)
    keys = RedisKeys("rr")
    fleet = parse_fleet(FLEET)
    table = ReplicaTable(m.name for m in fleet.models)
    d = Discovery(
        redis, keys, fleet, table, GatewayMetrics(), Departures(ConnectionPool(8, 1.0).retain), hold_s=30
    )
    try:
        await publish(redis, keys, ReplicaRecord(id="m-0", model="m", url="http://127.0.0.1:1"))
        await publish(redis, keys, ReplicaRecord(id="n-0", model="n", url="http://127.0.0.1:2"))
        await d.refresh()
        assert ids(table, "m") == ["m-0"] and ids(table, "n") == ["n-0"]
        await registry.remove(
            redis, keys, ReplicaRecord(id="n-0", model="n", url="")
        )  # same server: a withdrawn replica goes at once
        await d.refresh()
        assert ids(table, "n") == []
        server.kill()
        server = start_redis(tmp_path / "r2", port)  # a new, empty Redis
        await until(lambda: refreshed(d))
        assert ids(table, "m") == ["m-0"] and d.holding
        assert "redis restarted" in caplog.text
        await publish(redis, keys, ReplicaRecord(id="m-1", model="m", url="http://127.0.0.1:3"))
        await d.refresh()
        assert ids(table, "m") == ["m-1"]  # republished: the registry is followed again
        d.hold_until = 0.0  # the hold is over (its length is hold_s, one registry TTL)
        await registry.remove(redis, keys, ReplicaRecord(id="m-1", model="m", url=""))
        await d.refresh()
        assert ids(table, "m") == []
    finally:
        await redis.aclose()
        server.stop()


async def test_the_gateway_learns_added_and_forgets_removed_models_without_a_restart(
    tmp_path: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"fc{uuid.uuid4().hex[:6]}"
    one = fleet_yaml([{"name": "m", "source": {"path": "/m"}}])
    two = fleet_yaml([{"name": "m", "source": {"path": "/m"}}, {"name": "added", "source": {"path": "/a"}}])
    fleet_file = tmp_path / f"fleet-{prefix}.yaml"
    with (
        running(start_fake_engine(tmp_path, "--model", "m")) as m,
        running(start_fake_engine(tmp_path, "--model", "added")) as added,
    ):
        await register(redis_url, prefix, "m", m.url, "m-0")
        await register(redis_url, prefix, "added", added.url, "added-0")
        async with serve_gateway(tmp_path, one, redis_url, prefix) as gw, httpx.AsyncClient() as c:

            async def chat(model: str) -> httpx.Response:
                body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
                return await c.post(f"{gw}/v1/chat/completions", json=body)

            assert (await chat("added")).status_code == 404
            fleet_file.write_text(two)
            await until(lambda: _status(chat("added"), 200))
            listed = {d["id"] for d in (await c.get(f"{gw}/v1/models")).json()["data"]}
            assert listed == {"m", "added"}
            fleet_file.write_text("models: []\n")  # invalid: refused, the fleet stays
            await until(lambda: "fleet change refused" in caplog.text)
            assert "models: List should have at least 1 item" in caplog.text
            assert (await chat("added")).status_code == 200
            fleet_file.write_text(one)
            await until(lambda: _status(chat("added"), 404))
            err = (await chat("added")).json()["error"]
            assert err["code"] == "model_not_found"
            assert (await chat("m")).status_code == 200


async def _status(pending: object, status: int) -> bool:
    response = await pending  # type: ignore[misc]
    assert isinstance(response, httpx.Response)
    return response.status_code == status


async def test_a_reload_that_adds_a_prefix_affinity_model_uses_the_shared_prefix_index(
    tmp_path: Path, redis_url: str
) -> None:
    """Defect 1: the reload built policies without the shared prefix index, so an added prefix-affinity
    model routed alone (nothing recorded in Redis, no pick counted)."""
    prefix = f"fp{uuid.uuid4().hex[:6]}"
    one = fleet_yaml([{"name": "m", "source": {"path": "/m"}}])
    added = {"name": "p", "policy": "prefix_affinity", "source": {"path": "/p"}}
    two = fleet_yaml([{"name": "m", "source": {"path": "/m"}}, added])
    fleet_file = tmp_path / f"fleet-{prefix}.yaml"
    redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
    with running(start_fake_engine(tmp_path, "--model", "p")) as p:
        await register(redis_url, prefix, "m", p.url, "m-0")
        await register(redis_url, prefix, "p", p.url, "p-0")
        async with serve_gateway(tmp_path, one, redis_url, prefix) as gw, httpx.AsyncClient() as c:
            fleet_file.write_text(two)
            system = "You answer questions about the attached document. " * 30
            body = {
                "model": "p",
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": "q"}],
            }

            async def chat() -> httpx.Response:
                return await c.post(f"{gw}/v1/chat/completions", json=body)

            await until(lambda: _status(chat(), 200))
            assert await redis.hlen(RedisKeys(prefix).prefix_holders("p")) > 0
            metrics = (await c.get(f"{gw}/metrics")).text
            assert 'llmgw_prefix_index_picks_total{model="p"' in metrics
    await redis.aclose()
