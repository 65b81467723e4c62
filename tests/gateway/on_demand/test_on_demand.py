"""On-demand models at the gateway: a request for an asleep model waits in the shared queue (real Redis)
while the model wakes, exactly one wake is asked for however many gateways see demand, a wake that does
not come in time is a 503 with Retry-After. The replica is the FAKE ENGINE; the test plays the
supervisor: it reads the wake request, publishes the replica READY and announces it on the model state
channel. The gateways poll the registry only every 30 s here, so only the notice can tell them in time."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord, ReplicaState, new_instance_id, publish, remove
from testing.gateway import fleet_yaml, serve_gateway
from testing.poll import until
from testing.procs import Proc, start_fake_engine

SLOW_POLL = {"registry_poll_s": 30.0}
CHAT = {"model": "sleepy", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"), "--tokens", "3")
    yield proc
    proc.stop()


def fleet(**model: Any) -> str:
    base = {"name": "sleepy", "source": {"path": "/none"}, "activation": "on_demand", "concurrency": 2}
    return fleet_yaml([{**base, **model}, {"name": "awake", "source": {"path": "/none"}}])


class FakeSupervisor:
    """Publishes the model ASLEEP; wakes it the way the supervisor does once asked."""

    def __init__(self, redis: aioredis.Redis, keys: RedisKeys, url: str) -> None:
        self.redis, self.keys, self.url = redis, keys, url
        self.wakes_seen: list[str] = []

    async def publish(self, state: ReplicaState) -> None:
        fresh = new_instance_id()
        rec = ReplicaRecord(
            id="sleepy-0", model="sleepy", url=self.url, state=state, concurrency=2, instance=fresh
        )
        await publish(self.redis, self.keys, rec, 60)

    async def asked(self) -> bool:
        asker = await self.redis.get(self.keys.wake_request("sleepy"))
        if asker is not None:
            self.wakes_seen.append(asker.decode())
        return asker is not None

    async def wake(self) -> None:
        await self.publish(ReplicaState.READY)
        await self.redis.publish(self.keys.state_channel, "sleepy")
        await self.redis.delete(self.keys.wake_request("sleepy"))

    async def queued(self) -> int:
        return int(await self.redis.zcard(self.keys.queue("sleepy")))


@contextlib.asynccontextmanager
async def setup(redis_url: str, engine: Proc) -> AsyncIterator[FakeSupervisor]:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    redis = aioredis.Redis.from_url(redis_url)
    keys = RedisKeys(prefix)
    sup = FakeSupervisor(redis, keys, engine.url)
    await sup.publish(ReplicaState.ASLEEP)
    rec = ReplicaRecord(id="awake-0", model="awake", url=engine.url)
    await publish(redis, keys, rec, 60)
    try:
        yield sup
    finally:
        await redis.aclose()


def prefix_of(sup: FakeSupervisor) -> str:
    return sup.keys.prefix


def metric(text: str, name: str, model: str) -> float:
    for line in text.splitlines():
        if line.startswith(f'{name}{{model="{model}"}}'):
            return float(line.split()[-1])
    return 0.0


async def test_a_request_waits_in_the_queue_while_its_model_wakes(
    tmp_path: Path, redis_url: str, engine: Proc
) -> None:
    async with (
        setup(redis_url, engine) as sup,
        serve_gateway(
            tmp_path, fleet(max_queue_wait_s=0.2, wake_timeout_s=30), redis_url, prefix_of(sup), **SLOW_POLL
        ) as gw,
        httpx.AsyncClient(timeout=60) as c,
    ):
        models = {m["id"]: m for m in (await c.get(f"{gw}/v1/models")).json()["data"]}
        assert models["sleepy"]["state"] == "asleep" and models["sleepy"]["activation"] == "on_demand"
        assert models["awake"]["state"] == "awake" and models["awake"]["activation"] == "always"
        assert (await c.get(f"{gw}/ready")).json()["models"]["sleepy"]["state"] == "asleep"

        loop = asyncio.get_running_loop()
        asked_at = loop.time()
        req = asyncio.ensure_future(c.post(f"{gw}/v1/chat/completions", json=CHAT))
        await until(sup.asked)
        assert await until(sup.queued) == 1  # it waits in the shared queue, not in the gateway
        # the wake takes longer than max_queue_wait_s: that limit counts only once the model is awake
        await until(lambda: loop.time() - asked_at > 0.4)
        assert not req.done()
        await sup.wake()
        r = await req
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "tok0 tok1 tok2 "
        models = {m["id"]: m for m in (await c.get(f"{gw}/v1/models")).json()["data"]}
        assert models["sleepy"]["state"] == "awake"
        text = (await c.get(f"{gw}/metrics")).text
        assert metric(text, "llmgw_wake_requests_total", "sleepy") == 1
        assert metric(text, "llmgw_wake_wait_seconds_count", "sleepy") == 1
        assert 'llmgw_model_state{model="sleepy",state="asleep"}' in text


async def test_two_gateways_ask_for_exactly_one_wake(tmp_path: Path, redis_url: str, engine: Proc) -> None:
    text = fleet(wake_timeout_s=30)
    async with (
        setup(redis_url, engine) as sup,
        serve_gateway(tmp_path, text, redis_url, prefix_of(sup), gateway_id="a", **SLOW_POLL) as a,
        serve_gateway(tmp_path, text, redis_url, prefix_of(sup), gateway_id="b", **SLOW_POLL) as b,
        httpx.AsyncClient(timeout=60) as c,
    ):
        reqs = [asyncio.ensure_future(c.post(f"{gw}/v1/chat/completions", json=CHAT)) for gw in (a, b) * 4]
        await until(lambda: all_queued(sup, len(reqs)))
        assert await sup.asked()
        await sup.wake()
        answers = await asyncio.gather(*reqs)
        assert [r.status_code for r in answers] == [200] * len(reqs)
        metrics = [(await c.get(f"{gw}/metrics")).text for gw in (a, b)]
        assert sum(metric(m, "llmgw_wake_requests_total", "sleepy") for m in metrics) == 1
        assert sup.wakes_seen[0] in ("a", "b")  # one asker: whichever gateway saw demand first


async def all_queued(sup: FakeSupervisor, n: int) -> bool:
    return await sup.queued() == n


async def test_a_wake_that_does_not_come_is_a_503_with_retry_after(
    tmp_path: Path, redis_url: str, engine: Proc
) -> None:
    async with (
        setup(redis_url, engine) as sup,
        serve_gateway(tmp_path, fleet(wake_timeout_s=1), redis_url, prefix_of(sup)) as gw,
        httpx.AsyncClient(timeout=60) as c,
    ):
        r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "wake_timeout"
        assert int(r.headers["retry-after"]) >= 1
        assert await sup.queued() == 0  # it left the shared queue
        text = (await c.get(f"{gw}/metrics")).text
        assert metric(text, "llmgw_wake_requests_total", "sleepy") == 1
        assert metric(text, "llmgw_wake_timeouts_total", "sleepy") == 1


async def test_a_client_that_leaves_during_the_wake_leaves_the_queue(
    tmp_path: Path, redis_url: str, engine: Proc
) -> None:
    async with (
        setup(redis_url, engine) as sup,
        serve_gateway(tmp_path, fleet(wake_timeout_s=30), redis_url, prefix_of(sup)) as gw,
        httpx.AsyncClient(timeout=60) as c,
    ):
        req = asyncio.ensure_future(c.post(f"{gw}/v1/chat/completions", json=CHAT))
        await until(sup.queued)
        req.cancel()
        await asyncio.gather(req, return_exceptions=True)
        await until(lambda: all_queued(sup, 0))


async def test_an_always_model_without_replicas_is_still_a_503_before_admission(
    tmp_path: Path, redis_url: str, engine: Proc
) -> None:
    async with (
        setup(redis_url, engine) as sup,
        serve_gateway(tmp_path, fleet(), redis_url, prefix_of(sup)) as gw,
        httpx.AsyncClient(timeout=60) as c,
    ):
        await remove(sup.redis, sup.keys, ReplicaRecord(id="awake-0", model="awake", url=""))
        await until(lambda: c_state(c, gw, "awake", "unavailable"))
        r = await c.post(f"{gw}/v1/chat/completions", json={**CHAT, "model": "awake"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_ready_replica"


async def c_state(c: httpx.AsyncClient, gw: str, model: str, state: str) -> bool:
    models = {m["id"]: m for m in (await c.get(f"{gw}/v1/models")).json()["data"]}
    return bool(models[model]["state"] == state)


async def test_a_failed_wake_is_asked_for_again_while_requests_wait(
    tmp_path: Path, redis_url: str, engine: Proc
) -> None:
    async with (
        setup(redis_url, engine) as sup,
        serve_gateway(tmp_path, fleet(wake_timeout_s=30), redis_url, prefix_of(sup), **SLOW_POLL) as gw,
        httpx.AsyncClient(timeout=60) as c,
    ):
        req = asyncio.ensure_future(c.post(f"{gw}/v1/chat/completions", json=CHAT))
        await until(sup.asked)
        await sup.redis.delete(sup.keys.wake_request("sleepy"))  # the supervisor's wake failed: dropped
        await until(sup.asked)  # the waiting request asks again
        await sup.wake()
        r = await req
        assert r.status_code == 200, r.text
        assert metric((await c.get(f"{gw}/metrics")).text, "llmgw_wake_requests_total", "sleepy") == 2


async def test_an_on_demand_model_with_no_record_is_a_503_within_the_unregistered_bound(
    tmp_path: Path, redis_url: str, engine: Proc
) -> None:
    """Finding 6b: with no record of the model at all (the supervisor is down: its records expired), a
    request waited the whole ``wake_timeout_s`` (300 s by default) where a failed model answers at once."""
    async with (
        setup(redis_url, engine) as sup,
        serve_gateway(
            tmp_path, fleet(wake_timeout_s=30), redis_url, prefix_of(sup), wake_unregistered_s=0.5
        ) as gw,
        httpx.AsyncClient(timeout=60) as c,
    ):
        await remove(sup.redis, sup.keys, ReplicaRecord(id="sleepy-0", model="sleepy", url=""))
        await until(lambda: c_state(c, gw, "sleepy", "unavailable"))
        loop = asyncio.get_running_loop()
        started = loop.time()
        r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
        waited = loop.time() - started
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "model_unavailable"
        assert r.headers["x-should-retry"] == "true" and int(r.headers["retry-after"]) >= 1
        assert 0.4 <= waited < 2.0, waited
        assert await sup.queued() == 0  # it left the shared queue


async def test_a_request_granted_while_its_model_fell_asleep_again_asks_for_the_wake(
    tmp_path: Path, redis_url: str, engine: Proc
) -> None:
    """The model was awake, then slept again within the supervisor's 'awoken' marker (its wake request
    key for AWOKEN_MS after a wake): a request that comes then loses its SET NX to the marker and
    queues, and another gateway that still counts the model's old capacity grants it (its lease
    renewal). Granted, it waits for its own view of a ready replica; it must keep asking for the wake,
    or nobody wakes the model and it hangs for the whole wake_timeout_s (bench/gpu/sleep.sh dry's last
    swap step did)."""

    async def asked(sup: FakeSupervisor) -> bool:
        value = await sup.redis.get(sup.keys.wake_request("sleepy"))
        return value is not None and value != b"awoken"

    text, quick = fleet(wake_timeout_s=30), {"lease_ttl_s": 1.2, **SLOW_POLL}  # b renews every 0.4 s
    async with (
        setup(redis_url, engine) as sup,
        serve_gateway(tmp_path, text, redis_url, prefix_of(sup), gateway_id="a", **SLOW_POLL) as a,
        serve_gateway(tmp_path, text, redis_url, prefix_of(sup), gateway_id="b", **quick) as b,
        httpx.AsyncClient(timeout=60) as c,
    ):
        await sup.wake()  # awake: b serves a request and counts the model's capacity
        await until(lambda: c_state(c, b, "sleepy", "awake"))
        assert (await c.post(f"{b}/v1/chat/completions", json=CHAT)).status_code == 200
        await sup.publish(ReplicaState.ASLEEP)  # asleep again, the marker still there
        await sup.redis.set(sup.keys.wake_request("sleepy"), "awoken", px=1500)
        await sup.redis.publish(sup.keys.state_channel, "sleepy")
        await until(lambda: c_state(c, a, "sleepy", "asleep"))
        req = asyncio.ensure_future(c.post(f"{a}/v1/chat/completions", json=CHAT))
        await until(lambda: asked(sup), 10, "the waiting request's wake request")
        await sup.wake()
        r = await req
        assert r.status_code == 200, r.text
