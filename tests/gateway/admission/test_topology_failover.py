"""A Redis master killed (``kill -9``) under a steady admission load from two gateways, on Sentinel and on
Cluster (each the test run's shared topology: this module runs after the others that use it).

Every request is accounted for: answered (granted, ran once, released), a clear error (a 429 queue
refusal), or lost (anything else: an exception, a hang past its deadline). The gateways fall back to their
local share while no master answers and return to the shared queue by themselves; the test reports the
time from the kill until both are back, and checks no slot is left leased once the load has ended.
``LLMGW_FAILOVER_SECONDS`` lengthens the load after the kill (``make redis-failover``: 60 s).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import pytest

from gateway.admission.base import Ticket
from gateway.admission.fallback import FallbackAdmission
from gateway.admission.local import LocalAdmission
from gateway.admission.presence import Presence
from gateway.admission.redis_queue import RedisAdmission
from gateway.errors import QueueFull, QueueTimeout
from gateway.metrics import GatewayMetrics
from gateway.redis_clients import blocking_client, fast_client
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from tests.conftest import Topologies

MODEL = "m"
CAPACITY, WORKERS = 4, 8
AFTER_KILL_S = float(os.environ.get("LLMGW_FAILOVER_SECONDS", "4"))


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    runs: Counter[str] = field(default_factory=Counter)


async def gateway(url: str, keys: RedisKeys, gid: str) -> FallbackAdmission:
    redis = fast_client(url, 0.5)
    shared = RedisAdmission(
        redis, blocking_client(url, 0.5, 32), keys, gid, 6.0, io_timeout_s=0.5, beat_s=0.2
    )
    adm = FallbackAdmission(shared, LocalAdmission(), Presence(redis, keys, gid, 1.0), GatewayMetrics(), 0.2)
    await adm.start()
    return adm


async def one(adm: FallbackAdmission, tally: Tally, rid: str) -> None:
    try:
        lease, _ = await asyncio.wait_for(adm.acquire(Ticket(rid, MODEL, "t", 0, 10, 3.0, 100), CAPACITY), 10)
    except (QueueFull, QueueTimeout):
        tally.outcomes["clear error"] += 1
        return
    except Exception:  # anything else is a request lost to the failover
        tally.outcomes["lost"] += 1
        return
    tally.runs[rid] += 1
    await asyncio.sleep(0.01)  # the generation
    await lease.release()
    tally.outcomes["answered"] += 1


async def load(gws: list[FallbackAdmission], tally: Tally, stop: asyncio.Event) -> None:
    async def worker(w: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            await one(gws[w % 2], tally, f"w{w}-{n}")

    await asyncio.gather(*(worker(w) for w in range(WORKERS)))


@pytest.mark.parametrize("kind", ["sentinel", "cluster"])
async def test_master_killed_under_load(kind: str, topologies: Topologies) -> None:
    topo = topologies.get(kind)
    keys = RedisKeys(f"fo{uuid.uuid4().hex[:8]}")
    gws = [await gateway(topo.url, keys, f"g{i}") for i in range(2)]
    tally, stop = Tally(), asyncio.Event()
    running = asyncio.create_task(load(gws, tally, stop))
    try:
        await asyncio.sleep(1.0)  # steady load on the shared queue first
        assert not any(g.degraded for g in gws) and tally.outcomes["answered"] > 0
        victim = topo.master_port(keys.leases(MODEL))
        killed = time.monotonic()
        topo.node(victim).kill(signal.SIGKILL)
        back = await back_in_shared_mode(gws, killed)
        await asyncio.sleep(AFTER_KILL_S)
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
        await asyncio.to_thread(topo.revive)  # the next test of the shared topology gets it whole
    for g in gws:
        await g.shared.drain()
    redis = connect(topo.url, socket_timeout=2.0)
    leased = await redis.zcard(keys.leases(MODEL))
    await redis.aclose()
    for g in gws:
        await g.stop()
    twice = sum(1 for n in tally.runs.values() if n > 1)
    print(
        f"\n{kind}: {dict(tally.outcomes)}, ran twice {twice}, shared mode back {back:.1f} s after the kill"
    )
    assert tally.outcomes["lost"] == 0 and twice == 0
    assert leased == 0  # no slot left leased by nobody
    assert tally.outcomes["answered"] > 0


async def back_in_shared_mode(gws: list[FallbackAdmission], killed: float, deadline_s: float = 30) -> float:
    """Seconds from the kill until both gateways are on the shared queue again (having left it or not)."""
    while time.monotonic() - killed < deadline_s:
        await asyncio.sleep(0.1)
        if not any(g.degraded for g in gws) and all(g.shared.lean.healthy for g in gws):
            await asyncio.sleep(0.5)  # still shared half a second later: not a flap
            if not any(g.degraded for g in gws):
                return time.monotonic() - killed
    raise AssertionError(f"not back in shared mode within {deadline_s} s")
