"""Grants only to the living, and fair share given back, against a real Redis with the real scripts.

A gateway that dies leaves its waiters and leases behind: they are dropped once its presence stamp lapses,
so the model's capacity goes to the gateways still there. A grant nobody claims is reclaimed after one
renewal interval. A waiter that leaves (timeout, cancel, a client gone) gives its tenant's fair-share tag
back what queueing charged it, in the same script that removes it.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis.asyncio as aioredis

from gateway.admission.base import Ticket
from gateway.admission.redis_queue import Acquired, Left, QueueScripts, RedisAdmission
from gateway.admission.redis_wire import PipelinedRedis
from gateway.redis_clients import blocking_client, fast_client
from llmgw_contract.redis_keys import RedisKeys
from testing.poll import until
from tests.gateway.admission.conftest import MakeAdmission
from tests.gateway.admission.test_presence_renewal import LoopThread

MODEL = "m"


def ticket(rid: str = "r", tenant: str = "t", wait: float = 30.0, cost: int = 10) -> Ticket:
    return Ticket(rid, MODEL, tenant, 0, cost, wait, 100)


async def test_a_killed_gateways_queue_does_not_hold_the_survivors_back(
    make_admission: MakeAdmission, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    # The killed gateway holds both slots and queued ten more; it never beats, renews or leaves again.
    dead = await make_admission("dead", beat_s=0.5, start=False)
    held = [await dead.acquire(ticket(f"d{i}", tenant="d"), 2) for i in range(2)]
    assert len(held) == 2
    for i in range(10):
        outcome = await dead.scripts.acquire(ticket(f"q{i}", tenant="d"), f"dead:q{i}", 2)
        assert outcome[0] is Acquired.QUEUED
    survivor = await make_admission("live", beat_s=0.5)
    started = time.monotonic()
    leases = await asyncio.gather(*(survivor.acquire(ticket(f"s{i}", wait=3.0), 2) for i in range(2)))
    waited = time.monotonic() - started
    assert waited < 3.0  # granted within the wait (the dead leases' TTL is 30 s)
    assert await redis.hlen(keys.waiter_meta(MODEL)) == 0  # the dead gateway's waiters were dropped
    assert await redis.zcard(keys.queue(MODEL)) == 0
    assert int(await redis.hget(keys.tenant_usage(MODEL), "t:d") or 0) == 0  # ... and refunded
    assert await redis.hget(keys.alive(MODEL), dead.instance) is None
    for lease, _ in leases:
        await lease.release()


async def test_a_waiter_of_an_absent_gateway_is_never_granted(
    scripts: QueueScripts, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    await scripts.acquire(ticket(), "gw:holder", 1)
    await scripts.acquire(ticket(), "gone:w1", 1)
    await scripts.acquire(ticket(), "gw:w2", 1)
    await redis.hset(keys.alive(MODEL), "gone", 0)  # its stamp lapsed; no beat has swept it yet
    await scripts.release(MODEL, "gw:holder", 1)
    assert await redis.zscore(keys.leases(MODEL), "gw:w2") is not None
    assert await redis.zscore(keys.leases(MODEL), "gone:w1") is None
    assert await redis.hlen(keys.waiter_meta(MODEL)) == 0


async def test_a_grant_nobody_claims_is_reclaimed_after_one_renewal(
    redis: aioredis.Redis, keys: RedisKeys
) -> None:
    scripts = QueueScripts(PipelinedRedis.like(redis, 2.0), keys, ttl_ms=600)  # pick-up window 200 ms
    await scripts.acquire(ticket(), "gw:holder", 1)
    await scripts.acquire(ticket(), "gw:w1", 1)  # its gateway stalls: it never picks the grant up
    await scripts.acquire(ticket(), "gw:w2", 1)
    await scripts.release(MODEL, "gw:holder", 1)
    assert await redis.zscore(keys.leases(MODEL), "gw:w1") is not None

    async def w2_granted() -> bool:
        await scripts.tick(MODEL, 1, [])
        return await redis.zscore(keys.leases(MODEL), "gw:w2") is not None

    await until(w2_granted, 5)
    assert not await scripts.claim(MODEL, "gw:w1")  # late: it must queue again
    assert await scripts.claim(MODEL, "gw:w2")
    score, now = await redis.zscore(keys.leases(MODEL), "gw:w2"), await redis.time()
    assert score is not None and score > now[0] * 1000 + 300  # claimed: the full TTL, not the window


@pytest.mark.parametrize("keep", [True, False], ids=["timeout", "cancel"])
async def test_waiters_that_leave_give_their_tenant_its_share_back(
    scripts: QueueScripts, redis: aioredis.Redis, keys: RedisKeys, keep: bool
) -> None:
    await scripts.acquire(ticket(), "holder", 1)
    for i in range(20):  # tenant A's requests time out (or their clients go) in the queue
        await scripts.acquire(ticket(tenant="A"), f"x{i}", 1)
        assert await scripts.leave(MODEL, f"x{i}", keep, 1) is Left.LEFT_QUEUE
    for tenant in "AB":
        for i in range(5):
            await scripts.acquire(ticket(tenant=tenant), f"{tenant}{i}", 1)
    order, holder = [], "holder"
    ids = [f"{t}{i}" for t in "AB" for i in range(5)]
    for _ in ids:
        await scripts.release(MODEL, holder, 1)
        woken = [c for c in ids if await redis.lpop(keys.wake(MODEL, c))]
        assert len(woken) == 1
        holder = woken[0]
        order.append(holder[0])
    assert "".join(order) == "ABABABABAB"


async def test_a_cancelled_request_gives_its_tenant_its_share_back(
    make_admission: MakeAdmission, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    adm = await make_admission()
    lease, _ = await adm.acquire(ticket("holder"), 1)
    waiters = [asyncio.create_task(adm.acquire(ticket(f"a{i}", tenant="A", cost=100), 1)) for i in range(3)]

    async def queued() -> bool:
        return bool(await redis.zcard(keys.queue(MODEL)) == 3)

    await until(queued)
    assert int(await redis.hget(keys.tenant_usage(MODEL), "t:A") or 0) == 300
    for w in waiters:  # the clients disconnect
        w.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    assert int(await redis.hget(keys.tenant_usage(MODEL), "t:A") or 0) == 0
    await lease.release()


async def test_a_grant_reclaimed_at_pick_up_charges_its_tenant_once(
    make_admission: MakeAdmission, redis_url: str, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    """The waiter's gateway stalls past its grant's pick-up window (one renewal, 1 s here); the grant is
    reclaimed and given to another request, and the waiter queues again when it wakes. Its tenant's
    fair-share tag is charged once for it, not once per queueing."""
    other = await make_admission("other", ttl_s=3.0, start=False)
    stalled = RedisAdmission(
        fast_client(redis_url, 2.0),
        blocking_client(redis_url, 2.0, 8),
        keys,
        "stalled",
        3.0,
        io_timeout_s=2.0,
    )
    side = LoopThread()
    try:
        holder, _ = await other.acquire(ticket("holder", tenant="o"), 1)
        before = await blocked_clients(redis)
        waiter = asyncio.ensure_future(side.run(stalled.acquire(ticket("w", tenant="A", cost=10), 1)))

        async def queued(n: int) -> bool:
            return bool(await redis.zcard(keys.queue(MODEL)) == n)

        async def waiting() -> bool:
            return await blocked_clients(redis) == before + 1

        await until(lambda: queued(1), 5, "the waiter queued")
        await until(waiting, 5, "the waiter blocked on its wake list")
        assert int(await redis.hget(keys.tenant_usage(MODEL), "t:A") or 0) == 10
        blocked = threading.Event()
        side.loop.call_soon_threadsafe(lambda: (blocked.set(), time.sleep(2.5)))  # the waiter's loop stalls
        await asyncio.to_thread(blocked.wait, 5)
        await holder.release()  # granted to the waiter, which cannot pick it up

        async def grant_lapsed() -> bool:
            leases = await redis.zrange(keys.leases(MODEL), 0, -1, withscores=True)
            secs, micros = await redis.time()
            return bool(leases) and all(score < secs * 1000 + micros // 1000 for _, score in leases)

        await until(grant_lapsed, 5, "the waiter's grant past its pick-up window")
        second, _ = await other.acquire(ticket("second", tenant="o"), 1)  # the slot goes on
        await until(lambda: queued(1), 5, "the waiter queued again once its loop went on")
        await second.release()
        lease, _ = await asyncio.wait_for(waiter, 10)
        assert int(await redis.hget(keys.tenant_usage(MODEL), "t:A") or 0) == 10  # charged once, not twice
        await side.run(lease.release())
    finally:
        await side.run(stalled.stop())
        side.close()


async def blocked_clients(redis: aioredis.Redis) -> int:
    """Connections blocked in BLPOP on the server now."""
    return int((await redis.info("clients"))["blocked_clients"])
