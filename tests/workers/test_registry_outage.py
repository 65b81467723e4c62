"""The supervisor's registry through a whole Redis Cluster outage: every node frozen (SIGSTOP) for 4 s,
longer than a record lives, then continued. Its heartbeat must outlive the outage and the registry be
whole again within 10 s of its end (the FAKE ENGINE stands in for vLLM; the test run's shared cluster).

The supervisor's client has 0.5 s timeouts here (2 s in ``llmgw-workers``): redis-py's cluster client
then gives up within the 4 s pause and raises its own ``RedisClusterUnreachableError`` (not a
``RedisError``), as it does with 2 s timeouts after a pause of about 12 s."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from pathlib import Path

import httpx
import redis.asyncio as aioredis

from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import REDIS_DOWN, connect
from llmgw_contract.registry import RegistryTiming, RegistryWriter, ReplicaState, read_model
from llmgw_tools.stack.redis_topology import Topology, poll
from testing.poll import until
from tests.conftest import Topologies
from tests.workers.test_supervisor import OPTIONS, fake_replica
from workers.life.owner import Supervisor

TIMING = RegistryTiming(ttl_s=3.0, drain_grace_s=5)
"""A record lives 3 s (a heartbeat every second): the 4 s pause outlasts every record written before it."""
PAUSE_S = 4.0
WHOLE_WITHIN_S = 10.0


async def expiry(redis: aioredis.Redis, keys: RedisKeys, model: str, rid: str) -> int | None:
    """The replica's record expiry (ms, Redis' clock) while it is live; None without one, or while the
    cluster does not answer."""
    try:
        if rid not in await read_model(redis, keys, model):
            return None
        raw = await redis.hget(keys.registry(model), rid)
    except REDIS_DOWN:
        return None
    return int(raw.split(b" ", 1)[0]) if raw else None


async def outage(topo: Topology) -> float:
    """Freeze every node for PAUSE_S; returns when the outage ended (time.monotonic())."""
    with topo.paused():
        await asyncio.sleep(PAUSE_S)  # the fault's own length, not a wait for readiness
    return time.monotonic()


def settle(topo: Topology) -> None:
    """Leave the shared cluster serving for the tests after this one."""
    poll(topo.settled, 30, "cluster settled after the pause")


async def test_the_heartbeat_outlives_a_whole_cluster_pause_and_refills_the_registry_within_10_s(
    tmp_path: Path, topologies: Topologies
) -> None:
    topo = topologies.get("cluster")
    redis = connect(topo.url, socket_timeout=0.5, socket_connect_timeout=0.5)
    reader = connect(topo.url, socket_timeout=1.0, socket_connect_timeout=1.0)
    keys = RedisKeys(f"out{uuid.uuid4().hex[:6]}")
    rep = fake_replica(tmp_path)
    model, rid = rep.spec.model.name, rep.spec.id

    async def published() -> int | None:
        return await expiry(reader, keys, model, rid)

    async with httpx.AsyncClient() as client:
        options = dataclasses.replace(OPTIONS, timing=TIMING)
        sup = Supervisor([rep], RegistryWriter(redis, keys, TIMING), client, options)
        task = asyncio.create_task(sup.run())
        try:
            await until(lambda: rep.state is ReplicaState.READY, 20, "replica ready")
            await until(published, 10, "record published")
            ended = await outage(topo)
            first = await until(published, WHOLE_WITHIN_S, "the registry whole again after the outage")
            assert time.monotonic() - ended <= WHOLE_WITHIN_S
            assert isinstance(first, int)

            async def written_again() -> bool:  # the heartbeat lives on (a record lasts 3 s without it)
                later = await published()
                return later is not None and later > first + 1500

            await until(written_again, 3 * TIMING.ttl_s, "the record written again after the outage")
            assert not task.done()
        finally:
            await sup.drain()
            await asyncio.wait_for(task, 30)
            await redis.aclose()
            await reader.aclose()
            await asyncio.to_thread(settle, topo)
