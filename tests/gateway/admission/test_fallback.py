"""Redis going away and coming back: local limits meanwhile, nothing hangs, the shared queue returns alone."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import redis

from gateway.admission.base import Ticket
from gateway.admission.fallback import FallbackAdmission
from gateway.admission.local import LocalAdmission
from gateway.admission.presence import Presence
from gateway.admission.redis_queue import RedisAdmission
from gateway.errors import QueueTimeout
from gateway.metrics import GatewayMetrics
from gateway.redis_clients import blocking_client, fast_client
from llmgw_contract.redis_keys import RedisKeys
from testing.poll import until
from testing.procs import Proc, start_redis

MODEL = "m"
Make = Callable[[str], Awaitable[FallbackAdmission]]


def ticket(rid: str, wait: float = 10.0) -> Ticket:
    return Ticket(rid, MODEL, "t", 0, 10, wait, 100)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[Proc]:
    proc = start_redis(tmp_path / "redis")
    yield proc
    proc.stop()


@pytest.fixture
async def make(private_redis: Proc, keys: RedisKeys) -> AsyncIterator[Make]:
    url = f"redis://127.0.0.1:{private_redis.port}/0"
    made: list[FallbackAdmission] = []

    async def build(gateway_id: str) -> FallbackAdmission:
        redis = fast_client(url, 0.5)
        shared = RedisAdmission(redis, blocking_client(url, 0.5, 64), keys, gateway_id, 5.0, io_timeout_s=0.5)
        adm = FallbackAdmission(
            shared, LocalAdmission(), Presence(redis, keys, gateway_id, 1.0), GatewayMetrics(), probe_s=0.1
        )
        await adm.start()
        made.append(adm)
        return adm

    yield build
    for adm in made:
        await adm.stop()


def restart(proc: Proc, tmp: Path) -> Proc:
    return start_redis(tmp / "redis", port=proc.port)


def degraded_gauge(adm: FallbackAdmission) -> float:
    value = adm.metrics.registry.get_sample_value("llmgw_redis_degraded")
    assert value is not None
    return value


async def test_local_admission_while_redis_is_down_then_shared_again(
    make: Make, private_redis: Proc, tmp_path: Path, keys: RedisKeys
) -> None:
    adm = await make("g1")
    lease, _ = await adm.acquire(ticket("before"), 2)
    assert not adm.degraded and adm.shared.held(MODEL)
    private_redis.stop()
    started = time.monotonic()
    local, _ = await adm.acquire(ticket("during"), 2)
    assert time.monotonic() - started < 3
    assert adm.degraded and degraded_gauge(adm) == 1
    await local.release()
    await lease.release()  # the shared lease's release fails quietly: it would expire by itself
    proc = restart(private_redis, tmp_path)
    try:
        await until(lambda: not adm.degraded)
        assert degraded_gauge(adm) == 0
        back, _ = await adm.acquire(ticket("after"), 2)
        assert await adm.shared.redis.zcard(keys.leases(MODEL)) == 1
        await back.release()
    finally:
        proc.stop()


async def test_waiter_blocked_in_redis_falls_back_when_its_connection_dies(
    make: Make, private_redis: Proc
) -> None:
    adm = await make("g1")
    lease, _ = await adm.acquire(ticket("holder"), 1)
    waiter = asyncio.create_task(adm.acquire(ticket("waiter", wait=30), 1))
    queued = redis.Redis(port=private_redis.port)
    await until(lambda: queued.zcard(adm.shared.keys.queue(MODEL)) == 1)
    private_redis.kill()
    local, waited = await asyncio.wait_for(waiter, 5)  # no hang: the dead read falls back at once
    assert adm.degraded and waited < 5
    await local.release()
    await lease.release()


async def test_local_share_follows_the_gateways_seen(make: Make, private_redis: Proc) -> None:
    a, b = await make("g1"), await make("g2")
    await until(lambda: a.presence.replicas == 2 and b.presence.replicas == 2)
    private_redis.stop()
    held = [await a.acquire(ticket(f"r{i}"), 4) for i in range(2)]  # half of the capacity of 4
    assert a.degraded
    with pytest.raises(QueueTimeout):
        await a.acquire(ticket("third", wait=0.2), 4)
    for lease, _ in held:
        await lease.release()


async def test_start_without_redis_is_degraded_and_serves(keys: RedisKeys) -> None:
    url = "redis://127.0.0.1:1/0"
    redis = fast_client(url, 0.2)
    shared = RedisAdmission(redis, blocking_client(url, 0.2, 4), keys, "g", 5.0, io_timeout_s=0.2)
    adm = FallbackAdmission(shared, LocalAdmission(), Presence(redis, keys, "g", 1.0), GatewayMetrics(), 0.1)
    await adm.start()
    try:
        assert adm.degraded
        lease, _ = await asyncio.wait_for(adm.acquire(ticket("x"), 1), 3)
        await lease.release()
    finally:
        with contextlib.suppress(Exception):
            await adm.stop()
