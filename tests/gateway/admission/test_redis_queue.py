"""The shared queue against a real Redis: leases, grant order, hand-over, wake-up, cancel, limits, expiry."""

from __future__ import annotations

import asyncio
import random
import time
import uuid

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.admission.base import Ticket
from gateway.admission.order import FairQueue
from gateway.admission.queue_scripts import Acquired, Left, QueueScripts
from gateway.admission.redis_queue import RedisAdmission
from gateway.admission.redis_wire import PipelinedRedis
from gateway.errors import QueueFull, QueueTimeout
from llmgw_contract.redis_keys import RedisKeys
from testing.poll import until
from tests.gateway.admission.conftest import MakeAdmission

MODEL = "m"


def ticket(
    rid: str = "r",
    tenant: str = "t",
    priority: int = 0,
    cost: int = 10,
    wait: float = 30.0,
    max_queue: int = 100,
) -> Ticket:
    return Ticket(rid, MODEL, tenant, priority, cost, wait, max_queue)


async def granted_ticket(redis: aioredis.Redis, keys: RedisKeys, candidates: list[str]) -> str:
    """The one candidate whose wake list holds a grant."""
    woken = [c for c in candidates if await redis.llen(keys.wake(MODEL, c))]
    assert len(woken) == 1, woken
    await redis.delete(keys.wake(MODEL, woken[0]))
    return woken[0]


async def test_grants_up_to_capacity_then_queues(
    scripts: QueueScripts, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    outcomes = [await scripts.acquire(ticket(), f"id{i}", 3) for i in range(5)]
    assert [o[0] for o in outcomes] == [Acquired.GRANTED] * 3 + [Acquired.QUEUED] * 2
    assert await redis.zcard(keys.leases(MODEL)) == 3
    assert await redis.zcard(keys.queue(MODEL)) == 2


async def test_acquire_is_idempotent_per_ticket(scripts: QueueScripts) -> None:
    assert (await scripts.acquire(ticket(), "a", 1))[0] is Acquired.GRANTED
    assert (await scripts.acquire(ticket(), "a", 1))[0] is Acquired.GRANTED
    assert (await scripts.acquire(ticket(), "b", 1)) == (Acquired.QUEUED, 1)
    assert (await scripts.acquire(ticket(), "b", 1)) == (Acquired.QUEUED, 1)


async def test_release_hands_the_slot_to_the_head(
    scripts: QueueScripts, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    await scripts.acquire(ticket(), "holder", 1)
    await scripts.acquire(ticket(), "w1", 1)
    await scripts.acquire(ticket(), "w2", 1)
    removed, granted = await scripts.release(MODEL, "holder", 1)
    assert (removed, granted) == (1, 1)
    assert await redis.zscore(keys.leases(MODEL), "w1") is not None
    assert await granted_ticket(redis, keys, ["w1", "w2"]) == "w1"
    assert await redis.zcard(keys.leases(MODEL)) == 1


async def test_grant_order_priority_fairness_arrival(
    scripts: QueueScripts, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    await scripts.acquire(ticket(), "holder", 1)
    plan = [
        ("a1", "A", 0),
        ("a2", "A", 0),
        ("a3", "A", 0),
        ("a4", "A", 0),
        ("b1", "B", 0),
        ("b2", "B", 0),
        ("vip", "C", 5),
    ]
    for tid, tenant, prio in plan:
        assert (await scripts.acquire(ticket(tenant=tenant, priority=prio), tid, 1))[0] is Acquired.QUEUED
    order, holder = [], "holder"
    for _ in plan:
        await scripts.release(MODEL, holder, 1)
        holder = await granted_ticket(redis, keys, [p[0] for p in plan])
        order.append(holder)
    assert order == ["vip", "a1", "b1", "a2", "b2", "a3", "a4"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.sampled_from("ABC"), st.integers(0, 2), st.integers(1, 300)), min_size=1, max_size=12
    )
)
async def test_redis_grant_order_matches_the_reference(
    redis: aioredis.Redis, reqs: list[tuple[str, int, int]]
) -> None:
    keys = RedisKeys(f"h{uuid.uuid4().hex[:12]}")
    scripts = QueueScripts(PipelinedRedis.like(redis, 2.0), keys, 30_000)
    ref = FairQueue()
    await scripts.acquire(ticket(), "holder", 1)
    for i, (tenant, prio, cost) in enumerate(reqs):
        await scripts.acquire(ticket(tenant=tenant, priority=prio, cost=cost), f"q{i}", 1)
        ref.push(f"q{i}", tenant, prio, cost)
    ids, holder, got = [f"q{i}" for i in range(len(reqs))], "holder", []
    for _ in reqs:
        await scripts.release(MODEL, holder, 1)
        holder = await granted_ticket(redis, keys, ids)
        got.append(holder)
    assert got == [ref.pop() for _ in reqs]


async def test_ten_to_one_flood_gets_even_service(
    scripts: QueueScripts, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    await scripts.acquire(ticket(), "holder", 1)
    ids = [f"A{i}" for i in range(50)] + [f"B{i}" for i in range(5)]
    for tid in ids:
        await scripts.acquire(ticket(tenant=tid[0], cost=40), tid, 1)
    holder, served = "holder", []
    for _ in range(10):
        await scripts.release(MODEL, holder, 1)
        holder = await granted_ticket(redis, keys, ids)
        served.append(holder[0])
    assert served.count("B") == 5


async def test_queue_full_is_refused(make_admission: MakeAdmission) -> None:
    adm = await make_admission()
    lease, _ = await adm.acquire(ticket(max_queue=1), 1)
    waiter = asyncio.create_task(adm.acquire(ticket("w", max_queue=1), 1))
    await until(lambda: _depth(adm, 1))
    with pytest.raises(QueueFull) as err:
        await adm.acquire(ticket("x", max_queue=1), 1)
    assert err.value.status == 429 and err.value.retry_after and "full" in err.value.message
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    await lease.release()


async def _depth(adm: RedisAdmission, n: int) -> bool:
    depth = await adm.redis.zcard(adm.keys.queue(MODEL))
    return bool(depth == n)


async def test_wait_exceeded_is_refused_with_how_long(
    make_admission: MakeAdmission, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    adm = await make_admission()
    lease, _ = await adm.acquire(ticket(), 1)
    started = time.monotonic()
    with pytest.raises(QueueTimeout) as err:
        await adm.acquire(ticket("late", wait=0.3), 1)
    assert 0.25 < time.monotonic() - started < 3
    assert err.value.message.startswith("waited 0.") and "limit 0.3 s" in err.value.message
    assert await redis.zcard(keys.queue(MODEL)) == 0 and await redis.hlen(keys.waiter_meta(MODEL)) == 0
    await lease.release()


async def test_waiter_is_woken_by_the_release(make_admission: MakeAdmission) -> None:
    a, b = await make_admission("a"), await make_admission("b")
    lease, _ = await a.acquire(ticket("holder"), 1)
    waiter = asyncio.create_task(b.acquire(ticket("waiter", wait=60), 1))
    await until(lambda: _depth(a, 1))
    assert not waiter.done()
    await lease.release()
    done, _ = await asyncio.wait([waiter], timeout=5)  # far below the 60 s wait: woken, not timed out
    assert done
    got, waited = waiter.result()
    assert waited < 5
    await got.release()


async def test_cancelled_waiter_leaves_the_queue_at_once(
    make_admission: MakeAdmission, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    adm = await make_admission()
    lease, _ = await adm.acquire(ticket(), 1)
    waiters = [asyncio.create_task(adm.acquire(ticket(f"w{i}"), 1)) for i in range(3)]
    await until(lambda: _depth(adm, 3))
    waiters[1].cancel()
    await asyncio.gather(waiters[1], return_exceptions=True)
    assert await redis.zcard(keys.queue(MODEL)) == 2  # no polling: gone when the cancelled call returns
    assert await redis.hlen(keys.waiter_meta(MODEL)) == 2
    await lease.release()
    pending = {waiters[0], waiters[2]}  # their scripts may have reached Redis in either order
    while pending:
        done, pending = await asyncio.wait(pending, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        assert done
        for task in done:
            await task.result()[0].release()
    await adm.drain()  # releases run in the background (the answer does not wait for Redis)
    assert await redis.zcard(keys.leases(MODEL)) == 0


async def test_slot_granted_to_a_leaving_waiter_is_passed_on(
    scripts: QueueScripts, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    await scripts.acquire(ticket(), "holder", 1)
    await scripts.acquire(ticket(), "w1", 1)
    await scripts.acquire(ticket(), "w2", 1)
    await scripts.release(MODEL, "holder", 1)  # w1 is granted, but its client is gone before it wakes
    assert await scripts.leave(MODEL, "w1", False, 1) is Left.PASSED_ON
    assert await redis.zscore(keys.leases(MODEL), "w2") is not None
    assert await redis.zscore(keys.leases(MODEL), "w1") is None


async def test_timed_out_waiter_keeps_a_slot_granted_at_the_last_moment(scripts: QueueScripts) -> None:
    await scripts.acquire(ticket(), "holder", 1)
    await scripts.acquire(ticket(), "w1", 1)
    await scripts.release(MODEL, "holder", 1)
    assert await scripts.leave(MODEL, "w1", True, 1) is Left.KEPT


async def test_cancel_before_acquire_leaves_a_tombstone(
    scripts: QueueScripts, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    assert await scripts.leave(MODEL, "late", False, 1) is Left.UNKNOWN
    assert (await scripts.acquire(ticket(), "late", 1))[0] is Acquired.GONE
    assert await redis.zcard(keys.leases(MODEL)) == 0


async def test_waiter_past_its_deadline_is_skipped(
    scripts: QueueScripts, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    await scripts.acquire(ticket(), "holder", 1)
    await scripts.acquire(ticket(wait=0.001), "dead", 1)  # its gateway died: nobody will ever leave
    await scripts.acquire(ticket(), "alive", 1)
    entry = (await redis.hget(keys.waiter_meta(MODEL), "dead") or b"").decode()
    await redis.hset(keys.waiter_meta(MODEL), "dead", "1 " + entry.split(" ", 1)[1])  # its deadline passed
    await scripts.release(MODEL, "holder", 1)
    assert await redis.zscore(keys.leases(MODEL), "alive") is not None
    assert await redis.zscore(keys.leases(MODEL), "dead") is None


async def test_unrenewed_leases_expire_and_go_to_waiters(make_admission: MakeAdmission) -> None:
    crashed = await make_admission("crashed", ttl_s=1.0, start=False)  # never renews: as if killed
    held = [await crashed.acquire(ticket(f"c{i}"), 2) for i in range(2)]
    assert len(held) == 2
    survivor = await make_admission("survivor", ttl_s=1.0)
    started = time.monotonic()
    lease, _ = await asyncio.wait_for(survivor.acquire(ticket("s", wait=10), 2), 5)
    assert time.monotonic() - started < 1.0 + 1.0  # within the TTL plus one renewal interval and change
    await lease.release()


async def test_running_leases_are_renewed_past_their_ttl(
    make_admission: MakeAdmission, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    adm = await make_admission(ttl_s=0.6)
    lease, _ = await adm.acquire(ticket(), 1)
    first = await redis.zscore(keys.leases(MODEL), next(iter(adm.held(MODEL))))
    await asyncio.sleep(1.5)  # a long request: 2.5 TTLs
    later = await redis.zscore(keys.leases(MODEL), next(iter(adm.held(MODEL))))
    assert first is not None and later is not None and later > first
    await lease.release()
    await adm.drain()
    assert await redis.zcard(keys.leases(MODEL)) == 0


async def test_in_flight_never_exceeds_capacity_across_gateways(make_admission: MakeAdmission) -> None:
    gateways = [await make_admission("g1"), await make_admission("g2")]
    capacity, inflight, peak, served = 3, 0, 0, 0

    async def one(i: int) -> None:
        nonlocal inflight, peak, served
        lease, _ = await gateways[i % 2].acquire(ticket(f"r{i}", tenant=f"t{i % 3}", max_queue=500), capacity)
        inflight += 1
        peak = max(peak, inflight)
        await asyncio.sleep(random.uniform(0, 0.01))
        inflight -= 1
        served += 1
        await lease.release()

    await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(120))), 30)
    assert served == 120 and peak == capacity


async def tag(redis: aioredis.Redis, keys: RedisKeys, tenant: str) -> int | None:
    """The tenant's fair-share finish tag (None: never charged)."""
    value = await redis.hget(keys.tenant_usage(MODEL), f"t:{tenant}")
    return None if value is None else int(value)


async def test_a_queued_request_gives_back_to_its_tenants_tag_what_it_did_not_use(
    make_admission: MakeAdmission, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    adm = await make_admission()
    holder, _ = await adm.acquire(ticket("z0", tenant="z"), 1)  # granted at once: no tag charged
    queued = asyncio.create_task(adm.acquire(ticket("a1", tenant="a", cost=1000), 1))
    await until(lambda: _depth(adm, 1))
    await holder.release()
    a1, _ = await queued
    assert await tag(redis, keys, "a") == 1000  # queued with what it may generate
    await a1.refund(990)  # it used 10
    await a1.refund(990)  # given back once only
    await adm.drain()
    assert await tag(redis, keys, "a") == 10
    await a1.release()
    await adm.drain()  # the release runs in the background
    z1, _ = await adm.acquire(ticket("z1", tenant="z"), 1)  # at once again: nothing to give back
    await z1.refund(5)
    await adm.drain()
    assert await tag(redis, keys, "z") is None
    # Behind z1: tenant b's three requests and a's next one, each of cost 10. With the refund a's next
    # one starts at 10 (after b's first, beside b's second); charged its whole 1000 it would come last.
    names = ["b1", "b2", "a2", "b3"]
    tasks = {}
    for i, name in enumerate(names, start=1):
        tasks[asyncio.create_task(adm.acquire(ticket(name, tenant=name[0]), 1))] = name
        await until(lambda n=i: _depth(adm, n))  # type: ignore[misc]
    await z1.release()
    order, pending = [], set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1
        task = done.pop()
        order.append(tasks[task])
        await task.result()[0].release()
    assert order == ["b1", "b2", "a2", "b3"]
