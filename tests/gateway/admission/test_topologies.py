"""The shared state on each Redis topology (one server, Sentinel, Cluster; each started once per test run):
the admission scripts, the registry, presence and rate limits work the same through every client (the lean
pipelined one follows the Sentinels' master and the cluster's MOVED), and every script touches one slot."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from gateway.admission.base import Ticket
from gateway.admission.presence import Presence
from gateway.admission.redis_queue import RedisAdmission
from gateway.auth.ratelimit import RateLimiter, Verdict
from gateway.redis_clients import blocking_client, fast_client
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from llmgw_contract.registry import ReplicaRecord, publish, read_registry
from llmgw_tools.stack.redis_topology import KINDS
from tests.conftest import Topologies

MODEL = "m"


@pytest.fixture(params=KINDS)
def url(request: pytest.FixtureRequest, topologies: Topologies) -> str:
    return topologies.get(str(request.param)).url


@pytest.fixture
def keys() -> RedisKeys:
    return RedisKeys(f"topo{uuid.uuid4().hex[:8]}")


@pytest.fixture
async def gateways(url: str, keys: RedisKeys) -> AsyncIterator[list[RedisAdmission]]:
    made = [
        RedisAdmission(
            fast_client(url, 2.0), blocking_client(url, 2.0, 32), keys, f"g{i}", 30.0, io_timeout_s=2.0
        )
        for i in range(2)
    ]
    for adm in made:
        await adm.start()
    yield made
    for adm in made:
        await adm.stop()


def ticket(rid: str, tenant: str = "t") -> Ticket:
    return Ticket(rid, MODEL, tenant, 0, 10, 10.0, 100)


async def test_admission_across_two_gateways(gateways: list[RedisAdmission]) -> None:
    capacity, inflight, peak = 2, 0, 0

    async def one(i: int) -> None:
        nonlocal inflight, peak
        lease, _ = await gateways[i % 2].acquire(ticket(f"r{i}", tenant=f"t{i % 3}"), capacity)
        inflight += 1
        peak = max(peak, inflight)
        await asyncio.sleep(0.005)
        inflight -= 1
        await lease.release()

    await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(40))), 30)
    assert peak == capacity
    await gateways[0].beat()  # the presence beat script runs there too


async def test_registry_presence_and_rate_limits(url: str, keys: RedisKeys) -> None:
    redis = connect(url, socket_timeout=2.0)
    try:
        recs = [ReplicaRecord(id=f"{m}-0", model=m, url="http://x") for m in ("a", "b", "c")]
        for rec in recs:
            assert await publish(redis, keys, rec, 30)
        assert sorted(r.id for r in await read_registry(redis, keys)) == ["a-0", "b-0", "c-0"]
        assert await Presence(redis, keys, "g1", 30).beat() == 1
        assert await Presence(redis, keys, "g2", 30).beat() == 2
        limiter = RateLimiter(redis, keys)
        verdicts = [(await limiter.charge("k", 3, 0, 0)).verdict for _ in range(4)]
        assert verdicts == [Verdict.OK] * 3 + [Verdict.RPM]
    finally:
        await redis.aclose()
