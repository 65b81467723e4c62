"""On-demand models on a GPU, with the FAKE GPU ENGINE (vLLM's sleep endpoints, testing/fake_sleep.py) and the
FAKE nvidia-smi (testing/fake_nvidia_smi.py) on PATH: the supervisor's activator puts an idle replica to
sleep in place (its process stays, the level chosen from the host-RAM budget), wakes it with vLLM's calls
for that level, makes room by putting the least recently used one to sleep, measures every step per
process and keeps the ledger equal to the card; a replica whose sleep keeps most of its memory is stopped
instead. The fake engine answers 500 to a generation after a level-2 wake that skipped reload_weights, so
a wrong wake fails the warm-up."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
import yaml

from gateway.admission.base import Ticket
from gateway.admission.queue_scripts import QueueScripts, ticket_id
from gateway.admission.redis_wire import PipelinedRedis
from llmgw_contract.fleet_file import FleetWatch
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryWriter, ReplicaState
from llmgw_contract.replica_metrics import SupervisorMetrics
from testing.fake_nvidia_smi import fake_gpu_env
from testing.fake_workers import fake_gpu_launch
from testing.poll import until
from testing.procs import free_port
from tests.workers.test_on_demand import OPTIONS, Stack, fits
from workers.autoscale.loop import Autoscaler
from workers.converge.loop import Reconciler
from workers.host.gpu import nvidia_smi_reading
from workers.life.adopt import pid_alive
from workers.life.owner import Replica, Supervisor, SupervisorOptions
from workers.ondemand.activator import Activator, ActivatorOptions
from workers.replica.oom import needed_bytes
from workers.wiring import control_loops

GIB = 1 << 30
H200 = 143771 << 20
SETTLE_S = 0.5
"""A reading is booked once the other replicas of the card were still this long (short for the test)."""


@pytest.fixture(autouse=True)
def fake_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Path:
    caplog.set_level(logging.INFO)
    for k, v in fake_gpu_env(tmp_path).items():
        monkeypatch.setenv(k, v)
    return tmp_path / "gpu-mem"


def estimate(r: Replica) -> int:
    return needed_bytes(r.budget, H200, OPTIONS.gpu_reserve_bytes)


@asynccontextmanager
async def gpu_stack(
    tmp: Path,
    redis_url: str,
    models: list[dict[str, Any]],
    host_ram_gib: float = 0,
    scale: bool = False,
    options: SupervisorOptions = OPTIONS,
) -> AsyncIterator[Stack]:
    """The control plane on a FAKE GPU; ``scale``: with the scaler's loop too."""
    redis = aioredis.Redis.from_url(redis_url)
    keys = RedisKeys(f"gs{uuid.uuid4().hex[:6]}")
    metrics = SupervisorMetrics()
    path = tmp / "fleet.yaml"
    defaults = {"base_port": free_port(), "device": "gpu", "sleep_host_ram_gib": host_ram_gib}
    full = [
        {"source": {"path": f"/{m['name']}"}, "activation": "on_demand", "idle_timeout_s": 3600,
         "budget": {"gpu_memory_utilization": 0.42}, "placement": {"devices": [0]}, **m}
        for m in models
    ]  # fmt: skip
    path.write_text(yaml.safe_dump({"defaults": defaults, "models": full}))
    async with httpx.AsyncClient(timeout=10) as client:
        sup = Supervisor([], RegistryWriter(redis, keys, options.timing), client, options, metrics=metrics)
        rec = Reconciler(sup, FleetWatch(path, poll_s=0.05), fake_gpu_launch, fits, tmp, 1, metrics)
        act = Activator(
            sup, keys, lambda: rec.fleet, estimate, lambda: 1 << 40, metrics,
            ActivatorOptions(tick_s=0.05, gpu_settle_s=SETTLE_S),
            gpu_reading=nvidia_smi_reading, weights=lambda r: 13 * GIB,
        )  # fmt: skip
        auto = Autoscaler(rec, redis, keys, metrics, every_s=0.05, act=act) if scale else None
        try:
            async with control_loops(sup, rec, act, auto):
                yield Stack(sup, act, redis, keys, metrics, path)
        finally:
            await redis.aclose()


async def wake(st: Stack, model: str) -> None:
    await st.ask(model)
    await until(lambda: st.state(f"{model}-0") is ReplicaState.READY, deadline_s=30)


async def idle(st: Stack, model: str) -> None:
    """Make ``model`` idle now: its idle timeout shrinks to nothing, so the activator puts it to sleep; back
    once asleep and its reading booked."""
    await until(lambda: model not in st.act.wakes)  # the wake (and its measurement) is over
    st.act.last_used[model] = -1e9
    await until(lambda: st.state(f"{model}-0") is ReplicaState.ASLEEP, deadline_s=30)
    await until(lambda: not st.act.measuring, deadline_s=30)


def card_used() -> int:
    reading = nvidia_smi_reading(0)
    assert reading is not None
    return reading.card.used_bytes


def ledger_matches_card(st: Stack) -> bool:
    r = st.sup.replicas[0]
    return st.act.gpu.book(r).predicted_used(st.act.gpu.slots(r)) == card_used()


def calls_file(tmp: Path, model: str) -> list[str]:
    return [" ".join(line.split()[:2]) for line in (tmp / f"calls-{model}").read_text().splitlines()]


def with_calls(tmp: Path, m: dict[str, Any]) -> dict[str, Any]:
    """``m`` with its fake engine recording every sleep-mode call in ``tmp/calls-<name>``."""
    extra = ["--sleep-calls-file", str(tmp / f"calls-{m['name']}")]
    return {**m, "engine": {**m.get("engine", {}), "extra_args": extra}}


async def test_level_1_sleeps_in_place_and_wakes_with_one_call_measured_by_the_ledger(
    tmp_path: Path, redis_url: str
) -> None:
    models = [with_calls(tmp_path, {"name": "a", "sleep": {"level": "auto"}})]
    async with gpu_stack(tmp_path, redis_url, models, host_ram_gib=40) as st:
        await until(lambda: st.state("a-0") is ReplicaState.ASLEEP)
        await wake(st, "a")  # first wake: the process starts (nothing to wake in place yet)
        pid = st.replica("a-0").process.pid
        await idle(st, "a")
        assert st.replica("a-0").process.alive and st.act.levels["a-0"] == 1  # 13 GiB fit in 40
        assert st.act.gpu.book(st.replica("a-0")).asleep["a-0"] == 1600 << 20  # measured, per process
        await wake(st, "a")
        assert st.replica("a-0").process.pid == pid  # woken in place, not restarted
        assert calls_file(tmp_path, "a") == ["POST /sleep?level=1", "POST /wake_up"]
        await until(lambda: ledger_matches_card(st))  # measured once the gateways were told
        await until(lambda: st.count(st.metrics.wakes, "a", "ok") == 2)  # counted once the wake returns


async def test_level_2_wakes_weights_reloads_them_then_the_kv_cache(tmp_path: Path, redis_url: str) -> None:
    models = [with_calls(tmp_path, {"name": "b", "sleep": {"level": "auto"}})]
    async with gpu_stack(tmp_path, redis_url, models, host_ram_gib=0) as st:  # no host RAM: level 2
        await until(lambda: st.state("b-0") is ReplicaState.ASLEEP)
        await wake(st, "b")
        await idle(st, "b")
        assert st.act.levels["b-0"] == 2
        await wake(st, "b")  # the warm-up decodes: the fake refuses it if the weights were not reloaded
        assert calls_file(tmp_path, "b") == [
            "POST /sleep?level=2",
            "POST /wake_up?tags=weights",
            "POST /collective_rpc",
            "POST /wake_up?tags=kv_cache",
        ]
        await until(lambda: ledger_matches_card(st))  # measured once the gateways were told


async def test_dummy_weights_without_host_ram_are_stopped_not_put_to_level_2(
    tmp_path: Path, redis_url: str
) -> None:
    models = [{"name": "d", "engine": {"load_format": "dummy"}}]
    async with gpu_stack(tmp_path, redis_url, models, host_ram_gib=0) as st:
        await until(lambda: st.state("d-0") is ReplicaState.ASLEEP)
        await wake(st, "d")
        await idle(st, "d")
        assert st.act.levels["d-0"] == 0 and not st.replica("d-0").process.alive
        await wake(st, "d")


async def test_a_wake_without_room_puts_the_least_recently_used_to_sleep_in_place_and_the_ledger_holds(
    tmp_path: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    models = [{"name": n} for n in ("a", "b", "c")]  # 0.42 of the card each: two fit awake
    async with gpu_stack(tmp_path, redis_url, models, host_ram_gib=100) as st:
        await until(lambda: all(st.state(f"{m}-0") is ReplicaState.ASLEEP for m in "abc"))
        await wake(st, "a")
        await wake(st, "b")
        await wake(st, "c")  # a (least recently used) sleeps at level 1 to make room
        assert st.state("a-0") is ReplicaState.ASLEEP and st.replica("a-0").process.alive
        await until(lambda: st.count(st.metrics.sleeps, "a", "room") == 1)
        await wake(st, "a")  # now b makes room
        assert st.state("b-0") is ReplicaState.ASLEEP and st.state("c-0") is ReplicaState.READY
        assert card_used() <= H200
        await until(lambda: ledger_matches_card(st))  # measured once the gateways were told
        # a's wake reading came right after b's sleep: it was booked only once b had been still
        # (the level a sleeps at to make room is the policy's: its fastest sleep, level 2 by the seed costs)
        woke = re.compile(r"after wake from level [12] of replica=a-0")
        await until(lambda: woke.search(caplog.text))
        line = next(x for x in caplog.text.splitlines() if woke.search(x))
        still = float(re.search(r"the others still for ([0-9.]+) s", line).group(1))  # type: ignore[union-attr]
        assert still >= SETTLE_S, line


async def test_a_sleep_is_over_once_asleep_and_its_reading_is_booked_once_the_card_is_still(
    tmp_path: Path, redis_url: str
) -> None:
    """A wake waiting for this sleep's room does not wait for the card to settle (another replica's move
    can take many seconds): the reading is taken afterwards, and the learned sleep cost excludes it."""
    models = [{"name": n} for n in ("a", "b")]
    async with gpu_stack(tmp_path, redis_url, models, host_ram_gib=100) as st:
        await until(lambda: all(st.state(f"{m}-0") is ReplicaState.ASLEEP for m in "ab"))
        await wake(st, "a")
        await wake(st, "b")
        await until(lambda: "b" not in st.act.wakes)
        st.replica("b-0").state = ReplicaState.WAKING  # b changing: no settled reading until it is still
        st.act.last_used["a"] = -1e9
        await until(lambda: st.state("a-0") is ReplicaState.ASLEEP, deadline_s=5)
        assert st.act.steer.pilot.costs.cost("a", "sleep1") < 5
        st.replica("b-0").state = ReplicaState.READY
        await until(lambda: ledger_matches_card(st))


async def test_two_waiting_wakes_from_level_1_make_their_rooms_side_by_side(
    tmp_path: Path, redis_url: str
) -> None:
    """Each wake's room is planned in turn (the room lock), then carried out beside the other: neither
    waits for the other's drain (a drain settle each, seconds on a request's path)."""
    models = [{"name": n} for n in "abcd"]  # 0.42 of the card each: two fit awake
    slow_drain = replace(OPTIONS, timing=replace(OPTIONS.timing, drain_settle_s=1.5))
    async with gpu_stack(tmp_path, redis_url, models, host_ram_gib=100, options=slow_drain) as st:
        await until(lambda: all(st.state(f"{m}-0") is ReplicaState.ASLEEP for m in "abcd"))
        for m in "ab":
            await wake(st, m)
        for m in "ab":
            await idle(st, m)  # a and b asleep at level 1
        for m in "cd":
            await wake(st, m)
        await until(lambda: not st.act.wakes)
        await st.ask("a")
        await st.ask("b")
        both = (ReplicaState.DRAINING, ReplicaState.DRAINING)
        await until(lambda: (st.state("c-0"), st.state("d-0")) == both, 10, interval_s=0.02)
        await until(lambda: st.state("a-0") is st.state("b-0") is ReplicaState.READY, 10)
        assert card_used() <= H200


async def test_a_sleep_that_keeps_most_of_the_memory_stops_the_replica_from_then_on(
    tmp_path: Path, redis_url: str
) -> None:
    # a small embedding-like model: 0.05 of the card awake (about 8.7 GiB), 6 GiB of it kept asleep
    engine = {"extra_args": ["--asleep-mib", "6000"]}
    models = [{"name": "e", "budget": {"gpu_memory_utilization": 0.05}, "engine": engine}]
    async with gpu_stack(tmp_path, redis_url, models, host_ram_gib=100) as st:
        await until(lambda: st.state("e-0") is ReplicaState.ASLEEP)
        await wake(st, "e")
        await idle(st, "e")
        assert not st.replica("e-0").process.alive and st.act.levels["e-0"] == 0
        assert "e" in st.act.stop_instead
        await wake(st, "e")
        await idle(st, "e")  # stopped directly this time
        assert not st.replica("e-0").process.alive


async def test_a_scale_down_sleeps_first_and_demand_back_within_the_delay_wakes_it_rather_than_starting(
    tmp_path: Path, redis_url: str
) -> None:
    """Issue 47 item 4: where sleep exists, the scaler's scale-down drains the replica and puts it to sleep
    in place; demand that returns within the delay wakes it (same process, one /wake_up, no new replica,
    no cold start); asleep for the whole delay, it is stopped."""
    rule = {"min_replicas": 0, "max_replicas": 2, "target_per_replica": 1, "scale_down_delay_s": 1.0}
    model = {"name": "g", "replicas": 0, "scaling": rule, "sleep": {"level": "auto"}}
    async with gpu_stack(tmp_path, redis_url, [with_calls(tmp_path, model)], 40, scale=True) as st:
        queue = QueueScripts(PipelinedRedis.like(st.redis, 2.0), st.keys, ttl_ms=30_000)

        async def demand(n: int) -> str:  # a request waits in the shared queue (no capacity granted)
            t = ticket_id("gw-a", str(n))
            await queue.acquire(Ticket(f"r{n}", "g", "t", 0, 10, 30.0, 100), t, 0)
            return t

        first = await demand(0)
        cold = await until(lambda: st.metrics.cold_starts.labels("g")._sum.get(), deadline_s=30)  # from 0
        pid = st.replica("g-0").process.pid
        assert pid is not None
        await queue.leave("g", first, False, 0)
        await until(lambda: st.state("g-0") is ReplicaState.ASLEEP, deadline_s=30)  # after the delay
        assert st.replica("g-0").process.alive and st.act.levels["g-0"] == 1  # asleep in place, listed
        assert st.count(st.metrics.sleeps, "g", "scale_down") == 1

        again = await demand(1)  # within the delay
        await until(lambda: st.state("g-0") is ReplicaState.READY, deadline_s=30)
        assert st.replica("g-0").process.pid == pid  # woken, not started
        assert [r.spec.id for r in st.sup.replicas] == ["g-0"]
        assert st.metrics.cold_starts.labels("g")._sum.get() == cold  # a wake is no cold start

        await queue.leave("g", again, False, 0)
        await until(lambda: not st.sup.replicas, deadline_s=30)  # asleep for the delay, then stopped
        assert not pid_alive(pid)
        assert calls_file(tmp_path, "g") == ["POST /sleep?level=1", "POST /wake_up", "POST /sleep?level=1"]
