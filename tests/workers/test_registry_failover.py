"""The supervisor's registry through a Sentinel failover (``SENTINEL FAILOVER``: the old master stays up
and is turned into a replica only when the Sentinels next look at it, up to 10 s later). The supervisor
must write to the new master as soon as the Sentinels name it, not to the old one until it is demoted:
its record on the new master is written again within 2 s (the FAKE ENGINE stands in for vLLM; the test
run's shared Sentinel topology)."""

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
from llmgw_contract.registry import RegistryTiming, RegistryWriter, ReplicaState
from llmgw_contract.stamps import decoded
from llmgw_tools.stack.redis_topology import SERVICE, Topology, cli, poll
from testing.poll import until
from tests.conftest import Topologies
from tests.workers.test_supervisor import OPTIONS, fake_replica
from workers.life.owner import Supervisor

TIMING = RegistryTiming(ttl_s=3.0, drain_grace_s=5)
"""A heartbeat every second: without a re-resolve of the master, the record on the new master expires."""
WRITTEN_WITHIN_S = 2.0


async def expiry_on(port: int, keys: RedisKeys, model: str, rid: str) -> int | None:
    """The replica's record expiry (ms) on the server at ``port``; None without one or unreachable."""
    direct = aioredis.Redis(port=port, socket_timeout=1.0)
    try:
        raw = await direct.hget(keys.registry(model), rid)
    except REDIS_DOWN:
        return None
    finally:
        await direct.aclose()
    return int(decoded(raw).split(" ", 1)[0]) if raw else None


def failover(topo: Topology) -> int:
    """``SENTINEL FAILOVER``; returns the new master's port once the Sentinels name it. The command is
    asked again (every 3 s, for 45 s at most) while the Sentinels refuse it: within ``failover-timeout`` of
    an earlier failover of the test run's shared topology, or before its demoted master has synced as a
    replica, they answer an error (INPROG, NOGOODSLAVE) and do nothing. A data node an earlier test killed
    (the admission failover test kills the master) is started again first: without a replica the
    Sentinels have nothing to promote."""
    topo.revive()
    sentinel = next(n.port for n in topo.nodes if n.role == "sentinel" and n.popen.poll() is None)
    before = topo.master_port()
    deadline = time.monotonic() + 45

    def moved() -> bool:
        return topo.master_port() != before

    while True:
        cli(sentinel, "SENTINEL", "FAILOVER", SERVICE)
        try:
            poll(moved, min(3.0, max(0.1, deadline - time.monotonic())), "the Sentinels name a new master")
            return topo.master_port()
        except TimeoutError:
            if time.monotonic() >= deadline:
                raise


async def test_the_heartbeat_writes_to_the_new_master_as_soon_as_the_sentinels_name_it(
    tmp_path: Path, topologies: Topologies
) -> None:
    topo = topologies.get("sentinel")
    redis = connect(topo.url, socket_timeout=0.5, socket_connect_timeout=0.5)
    keys = RedisKeys(f"fo{uuid.uuid4().hex[:6]}")
    rep = fake_replica(tmp_path)
    model, rid = rep.spec.model.name, rep.spec.id

    async with httpx.AsyncClient() as client:
        options = dataclasses.replace(OPTIONS, timing=TIMING)
        sup = Supervisor([rep], RegistryWriter(redis, keys, TIMING), client, options)
        task = asyncio.create_task(sup.run())
        try:
            await until(lambda: rep.state is ReplicaState.READY, 20, "replica ready")
            await until(lambda: expiry_on(topo.master_port(), keys, model, rid), 10, "record published")
            new = await asyncio.to_thread(failover, topo)
            named = time.monotonic()
            first = await expiry_on(new, keys, model, rid) or 0

            async def written_again() -> bool:
                later = await expiry_on(new, keys, model, rid)
                return later is not None and later > first + 500

            await until(written_again, 12, "the record written again on the new master")
            took = time.monotonic() - named
            assert took <= WRITTEN_WITHIN_S, f"written to the new master {took:.1f} s after the failover"
            assert not task.done()
        finally:
            await sup.drain()
            await asyncio.wait_for(task, 30)
            await redis.aclose()
            await asyncio.to_thread(poll, topo.settled, 30, "sentinel settled after the failover")
