"""On-demand models end to end on the CPU path: the reconciler publishes an on-demand model ASLEEP, the
activator wakes it when a gateway asks (the replica process is the FAKE ENGINE), warms it up, announces
it, and stops it again once idle; to make room it stops the least recently used idle model, never a
busy one. The last test puts a real gateway in front: requests wake the model, idleness stops it, over
several cycles, one wake per cycle."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
import yaml

from llmgw_contract.fleet_file import FleetWatch
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryTiming, RegistryWriter, ReplicaRecord, ReplicaState, read_registry
from llmgw_contract.replica_metrics import SupervisorMetrics
from testing.fake_workers import fake_launch
from testing.gateway import serve_gateway
from testing.poll import until
from testing.procs import free_port
from workers.converge.headroom import Headroom
from workers.converge.loop import Reconciler
from workers.life.owner import Replica, RestartBackoff, Supervisor, SupervisorOptions
from workers.ondemand.activator import Activator, ActivatorOptions
from workers.ondemand.demand import is_wake_request
from workers.replica.launch import ReplicaSpec
from workers.wiring import control_loops

GIB = 1 << 30
SLOW_POLL = {"registry_poll_s": 30.0}  # only the state notices can tell the gateway in time
OPTIONS = SupervisorOptions(
    ready_deadline_s=20,
    timing=RegistryTiming(ttl_s=3, drain_settle_s=0.2, drain_grace_s=5),
    backoff=RestartBackoff(base_s=0.05, max_s=0.2, give_up_after=3),
    max_start_attempts=1,
    redis_check_s=0.1,
)


async def fits(_: ReplicaSpec) -> Headroom:
    return Headroom(1 << 40, 1)


def fleet_text(
    base: int, models: list[dict[str, Any]], budget_gib: float | None = None, autopilot: bool = True
) -> str:
    defaults: dict[str, Any] = {"base_port": base, "autopilot": autopilot}
    if budget_gib is not None:
        defaults["memory_budget_gib"] = budget_gib
    full = [{"source": {"path": f"/{m['name']}"}, "concurrency": 2, **m} for m in models]
    return yaml.safe_dump({"defaults": defaults, "models": full})


@pytest.fixture(autouse=True)
def info_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)


@dataclass
class Stack:
    sup: Supervisor
    act: Activator
    redis: aioredis.Redis
    keys: RedisKeys
    metrics: SupervisorMetrics
    fleet_file: Path

    def replica(self, rid: str) -> Replica:
        return next(r for r in self.sup.replicas if r.spec.id == rid)

    def state(self, rid: str) -> ReplicaState | None:
        r = [x for x in self.sup.replicas if x.spec.id == rid]
        return r[0].state if r else None

    async def published(self, rid: str) -> ReplicaState | None:
        recs: list[ReplicaRecord] = await read_registry(self.redis, self.keys)
        return next((r.state for r in recs if r.id == rid), None)

    async def ask(self, model: str) -> None:
        await self.redis.set(self.keys.wake_request(model), "test", px=30_000)

    def count(self, metric: Any, *labels: str) -> float:
        return float(metric.labels(*labels)._value.get())


@asynccontextmanager
async def on_demand_stack(
    tmp: Path,
    redis_url: str,
    models: list[dict[str, Any]],
    budget_gib: float | None = None,
    autopilot: bool = True,
) -> AsyncIterator[Stack]:
    redis = aioredis.Redis.from_url(redis_url)
    keys = RedisKeys(f"od{uuid.uuid4().hex[:6]}")
    metrics = SupervisorMetrics()
    path = tmp / "fleet.yaml"
    path.write_text(fleet_text(free_port(), models, budget_gib, autopilot))
    async with httpx.AsyncClient(timeout=10) as client:
        sup = Supervisor([], RegistryWriter(redis, keys, OPTIONS.timing), client, OPTIONS, metrics=metrics)
        rec = Reconciler(sup, FleetWatch(path, poll_s=0.05), fake_launch, fits, tmp, 1, metrics)
        act = Activator(
            sup, keys, lambda: rec.fleet, lambda r: 1 * GIB, lambda: 1 << 40, metrics,
            ActivatorOptions(tick_s=0.05), measure=lambda pid: 1 * GIB,
        )  # fmt: skip
        try:
            async with control_loops(sup, rec, act):
                yield Stack(sup, act, redis, keys, metrics, path)
        finally:
            await redis.aclose()


@pytest.mark.parametrize("autopilot", [True, False], ids=["autopilot", "previous-policy"])
async def test_asleep_until_asked_then_woken_warmed_announced_and_put_back_to_sleep_when_idle(
    tmp_path: Path, redis_url: str, autopilot: bool
) -> None:
    models = [{"name": "od", "activation": "on_demand", "idle_timeout_s": 0.5}]
    async with on_demand_stack(tmp_path, redis_url, models, autopilot=autopilot) as st:
        await until(lambda: st.published("od-0"))
        assert await st.published("od-0") is ReplicaState.ASLEEP
        assert not st.replica("od-0").process.alive
        pubsub = st.redis.pubsub()
        await pubsub.subscribe(st.keys.state_channel)
        await st.ask("od")
        await until(lambda: st.state("od-0") is ReplicaState.READY)
        assert st.replica("od-0").process.alive
        notice = None
        while notice is None or notice["type"] != "message":
            notice = await pubsub.get_message(timeout=5)
        assert notice["data"] == b"od"
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        # the request is answered: a gateway that had not heard yet asks in vain (one wake asked per cycle)
        assert not is_wake_request(await st.redis.get(st.keys.wake_request("od")))
        assert not await st.redis.set(st.keys.wake_request("od"), "late-gateway", nx=True, px=30_000)
        stats = (await st.sup.client.get(f"{st.replica('od-0').spec.url}/stats")).json()
        assert stats["served"] >= 1  # the warm-up decoded a token before any traffic
        assert st.count(st.metrics.wakes, "od", "ok") == 1
        # nothing in flight or queued: asleep again after idle_timeout_s
        await until(lambda: st.state("od-0") is ReplicaState.ASLEEP)
        assert not st.replica("od-0").process.alive
        assert await st.published("od-0") is ReplicaState.ASLEEP
        await until(lambda: st.count(st.metrics.sleeps, "od", "idle") == 1)  # counted after the notice
        # the autopilot's decisions, each counted with its reason (none with defaults.autopilot: false)
        moves = st.metrics.autopilot_moves
        assert st.count(moves, "od", "start", "waiting") == st.count(moves, "od", "stop", "idle") == autopilot


async def test_a_model_with_leases_in_the_queue_stays_awake(tmp_path: Path, redis_url: str) -> None:
    models = [{"name": "od", "activation": "on_demand", "idle_timeout_s": 0.3}]
    async with on_demand_stack(tmp_path, redis_url, models) as st:
        await until(lambda: st.published("od-0"))
        await st.ask("od")
        await until(lambda: st.state("od-0") is ReplicaState.READY)
        await st.redis.zadd(st.keys.leases("od"), {"lease-1": 1 << 50})  # a request in flight
        await until(lambda: st.act.last_used.get("od", 0) > 0)
        seen = st.act.last_used["od"]
        await until(lambda: st.act.last_used["od"] > seen + 0.6)  # ticks kept it busy past the timeout
        assert st.state("od-0") is ReplicaState.READY
        await st.redis.delete(st.keys.leases("od"))
        await until(lambda: st.state("od-0") is ReplicaState.ASLEEP)


async def test_a_wake_without_room_puts_the_least_recently_used_idle_model_to_sleep_never_a_busy_one(
    tmp_path: Path, redis_url: str
) -> None:
    models = [
        {"name": name, "activation": "on_demand", "idle_timeout_s": 3600, "priority": 50}
        for name in ("a", "b", "c")
    ]
    async with on_demand_stack(tmp_path, redis_url, models, budget_gib=2.5) as st:  # 1 GiB each: two fit
        await until(lambda: all(st.state(f"{m}-0") is ReplicaState.ASLEEP for m in "abc"))
        for m in "ab":
            await st.ask(m)
            await until(lambda m=m: st.state(f"{m}-0") is ReplicaState.READY)  # type: ignore[misc]
        await st.redis.zadd(st.keys.leases("b"), {"lease-1": 1 << 50})  # b is busy (used last)
        await st.ask("c")
        await until(lambda: st.state("c-0") is ReplicaState.READY)
        assert st.state("a-0") is ReplicaState.ASLEEP and st.state("b-0") is ReplicaState.READY
        await until(lambda: st.count(st.metrics.sleeps, "a", "room") == 1)
        # now a asks again: c is idle and least recently used next to busy b, so c makes room
        await st.ask("a")
        await until(lambda: st.state("a-0") is ReplicaState.READY)
        assert st.state("c-0") is ReplicaState.ASLEEP and st.state("b-0") is ReplicaState.READY


async def test_a_wake_without_room_now_waits_for_the_busy_model_to_idle_then_takes_its_room(
    tmp_path: Path, redis_url: str
) -> None:
    """As in the simulation, a wake that finds every model busy stays pending and is planned again each
    tick (not failed, its request dropped and asked again after ``retry_wake_s``)."""
    models = [{"name": n, "activation": "on_demand", "idle_timeout_s": 3600} for n in ("a", "b")]
    async with on_demand_stack(tmp_path, redis_url, models, budget_gib=1.5) as st:
        await until(lambda: st.state("b-0") is ReplicaState.ASLEEP)
        await st.ask("a")
        await until(lambda: st.state("a-0") is ReplicaState.READY)
        await st.redis.zadd(st.keys.leases("a"), {"lease-1": 1 << 50})
        await st.ask("b")
        await asyncio.sleep(0.3)  # a wake that would fail has failed by now
        assert st.state("a-0") is ReplicaState.READY and st.state("b-0") is ReplicaState.ASLEEP
        await st.redis.delete(st.keys.leases("a"))
        await until(lambda: st.state("b-0") is ReplicaState.READY, 2.0)
        assert st.state("a-0") is ReplicaState.ASLEEP
        assert st.count(st.metrics.wakes, "b", "failed") == 0


async def test_a_wake_that_cannot_fit_fails_and_keeps_the_busy_model(tmp_path: Path, redis_url: str) -> None:
    """Past its ``wake_timeout_s`` without room, the wake fails."""
    models = [{"name": n, "activation": "on_demand", "idle_timeout_s": 3600, "wake_timeout_s": 0.5}
              for n in ("a", "b")]  # fmt: skip
    async with on_demand_stack(tmp_path, redis_url, models, budget_gib=1.5) as st:
        await until(lambda: st.state("b-0") is ReplicaState.ASLEEP)
        await st.ask("a")
        await until(lambda: st.state("a-0") is ReplicaState.READY)
        await st.redis.zadd(st.keys.leases("a"), {"lease-1": 1 << 50})
        await st.ask("b")
        await until(lambda: st.count(st.metrics.wakes, "b", "failed") == 1)
        assert st.state("a-0") is ReplicaState.READY and st.state("b-0") is ReplicaState.ASLEEP
        # dropped, not retried every tick: the next request asks again, after the retry interval
        assert not await st.redis.exists(st.keys.wake_request("b"))
        assert st.act.retry_at["b"] > 0


async def test_through_a_gateway_requests_wake_the_model_and_idleness_stops_it_each_cycle(
    tmp_path: Path, redis_url: str
) -> None:
    models = [{"name": "od", "activation": "on_demand", "idle_timeout_s": 0.5, "wake_timeout_s": 30}]
    body = {"model": "od", "messages": [{"role": "user", "content": "hi"}]}
    async with (
        on_demand_stack(tmp_path, redis_url, models) as st,
        serve_gateway(
            tmp_path, st.fleet_file.read_text(), redis_url, st.keys.prefix, registry_poll_s=30
        ) as gw,
        httpx.AsyncClient(timeout=60) as c,
    ):
        for cycle in range(1, 3):
            await until(lambda: st.state("od-0") is ReplicaState.ASLEEP)
            answers = await asyncio.gather(
                *(c.post(f"{gw}/v1/chat/completions", json=body) for _ in range(4))
            )
            assert [r.status_code for r in answers] == [200] * 4, [r.text for r in answers]
            await until(lambda n=cycle: st.count(st.metrics.wakes, "od", "ok") == n)  # one wake per cycle
            await until(lambda cycle=cycle: st.count(st.metrics.sleeps, "od", "idle") == cycle)  # type: ignore[misc]


async def test_a_wake_request_for_an_awake_model_is_cleared_not_left_to_keep_it_awake(
    tmp_path: Path, redis_url: str
) -> None:
    models = [{"name": "od", "activation": "on_demand", "idle_timeout_s": 3600}]
    async with on_demand_stack(tmp_path, redis_url, models) as st:
        await until(lambda: st.published("od-0"))
        await st.ask("od")
        await until(lambda: st.state("od-0") is ReplicaState.READY)
        pid = st.replica("od-0").process.pid
        await st.ask("od")  # a gateway that had not heard of the wake yet
        await until(lambda: not_asked(st))
        assert st.replica("od-0").process.pid == pid and st.count(st.metrics.wakes, "od", "ok") == 1


async def test_a_model_that_sleeps_within_its_awoken_marker_takes_the_next_wake_request_at_once(
    tmp_path: Path, redis_url: str
) -> None:
    """The 'awoken' marker (the wake request key for AWOKEN_MS after a wake, so that a gateway that had
    not heard asks in vain) is dropped when the model goes to sleep: a model put to sleep within it
    (an urgent room move, a short idle timeout) takes a gateway's next wake request at once instead of
    refusing it until the marker expires."""
    models = [{"name": "od", "activation": "on_demand", "idle_timeout_s": 0.2}]
    async with on_demand_stack(tmp_path, redis_url, models) as st:
        await until(lambda: st.published("od-0"))
        await st.ask("od")
        await until(lambda: st.state("od-0") is ReplicaState.READY)
        await until(lambda: st.state("od-0") is ReplicaState.ASLEEP)
        assert await st.redis.set(st.keys.wake_request("od"), "gateway-1", nx=True, px=30_000)
        await until(lambda: st.state("od-0") is ReplicaState.READY)  # and it is woken again


async def not_asked(st: Stack) -> bool:
    return not await st.redis.exists(st.keys.wake_request("od"))


def test_wake_request_is_a_gateways_ask_not_the_awoken_marker() -> None:
    assert is_wake_request("gateway-1") and is_wake_request(b"gateway-1")
    assert not is_wake_request(None) and not is_wake_request(b"awoken")


async def test_editing_an_asleep_models_engine_arguments_parks_the_replacement_until_a_request(
    tmp_path: Path, redis_url: str
) -> None:
    """The replacement of an asleep on-demand replica is listed ASLEEP, not started: nothing asked for
    it, and only a wake goes through the room's ledger. A request then wakes it with the new arguments."""
    models = [{"name": "od", "activation": "on_demand", "idle_timeout_s": 3600}]
    async with on_demand_stack(tmp_path, redis_url, models) as st:
        await until(lambda: st.published("od-0"))
        edited = yaml.safe_load(st.fleet_file.read_text())
        edited["models"][0]["engine"] = {"extra_args": ["--tokens", "3"]}
        st.fleet_file.write_text(yaml.safe_dump(edited))
        await until(lambda: st.count(st.metrics.actions, "replace", "od", "ok") == 1)
        (new,) = st.sup.replicas
        assert new.spec.id != "od-0" and "--tokens" in new.process.argv
        assert new.state is ReplicaState.ASLEEP and await st.published(new.spec.id) is ReplicaState.ASLEEP
        assert new.process.pid is None and st.count(st.metrics.wakes, "od", "ok") == 0
        await st.ask("od")
        await until(lambda: new.state is ReplicaState.READY)
        # the wake is counted once every replica of the model is up, just after this one's READY
        await until(lambda: st.count(st.metrics.wakes, "od", "ok") == 1)


async def test_a_cpu_on_demand_model_beside_an_always_one_is_listed_from_its_park_through_its_wake(
    tmp_path: Path, redis_url: str
) -> None:
    """The end-to-end stack's case (Gemma on a CPU beside SmolLM2, autopilot on by default): the on-demand
    replica, which has no sleep mode, is listed ASLEEP soon after start and its record never leaves the
    registry, not while the always model starts, not through a wake that takes a while: a gateway that
    finds no record for ``wake_unregistered_s`` answers 503 model_unavailable."""
    slow = {"extra_args": ["--start-delay-s", "1"]}
    models = [
        {"name": "a", "engine": slow},
        {"name": "od", "activation": "on_demand", "idle_timeout_s": 3600, "priority": 40, "engine": slow},
    ]
    async with on_demand_stack(tmp_path, redis_url, models) as st:
        first = await until(lambda: st.published("od-0"), what="od-0 listed")
        assert first is ReplicaState.ASLEEP
        listed: list[ReplicaState | None] = [first]

        async def watch() -> None:
            while True:
                listed.append(await st.published("od-0"))
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        try:
            await until(lambda: st.state("a-0") is ReplicaState.READY, what="the always model ready")
            await until(lambda: len(listed) > 2)  # sampled before the ask too
            assert st.state("od-0") is ReplicaState.ASLEEP and not st.replica("od-0").process.alive
            await st.ask("od")
            await until(lambda: st.state("od-0") is ReplicaState.READY, what="od-0 woken")
            await until(lambda: listed[-1] is ReplicaState.READY)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        assert None not in listed, listed
        assert {ReplicaState.ASLEEP, ReplicaState.WAKING} <= set(listed)
        assert st.count(st.metrics.autopilot_moves, "od", "start", "waiting") == 1
