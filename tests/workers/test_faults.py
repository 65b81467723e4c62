"""The control plane's faults, each with the FAKE ENGINE (bench/fake_engine.py) as the launcher and a
real Redis, run through the one wiring (:func:`workers.wiring.build_control_plane`): a spawn error on one
model, an unexpected error in a wake, a retire during a wake, a dead group leader, a drain whose
``/metrics`` fails."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
import yaml

from llmgw_contract.fleet import parse_fleet
from llmgw_contract.fleet_file import FleetWatch
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryTiming, RegistryWriter, ReplicaState
from llmgw_contract.supervision import TaskGroup
from testing.fake_workers import fake_launch
from testing.gateway import serve_app, serve_gateway
from testing.poll import until
from testing.procs import free_port
from workers.converge.headroom import Headroom
from workers.life.adopt import AdoptedProcess, pid_alive
from workers.life.owner import Replica, RestartBackoff, Supervisor, SupervisorOptions
from workers.ondemand.activator import ActivatorOptions
from workers.replica.launch import Launch, ReplicaSpec
from workers.wiring import ControlPlane, build_control_plane, running

GIB = 1 << 30
OPTIONS = SupervisorOptions(
    ready_deadline_s=20,
    timing=RegistryTiming(ttl_s=3, drain_settle_s=0.2, drain_grace_s=5),
    backoff=RestartBackoff(base_s=0.05, max_s=0.2, give_up_after=3),
    max_start_attempts=1,
    redis_check_s=0.1,
)
MISSING = "/nonexistent/taskset"
"""A launcher that is not on the host: spawning raises FileNotFoundError."""


@pytest.fixture(autouse=True)
def info_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)


async def fits(_: ReplicaSpec) -> Headroom:
    return Headroom(1 << 40, 1)


def fleet_text(base: int, models: list[dict[str, Any]]) -> str:
    full = [{"source": {"path": f"/{m['name']}"}, "concurrency": 2, **m} for m in models]
    return yaml.safe_dump({"defaults": {"base_port": base}, "models": full})


def launcher(broken: set[str]) -> Callable[[ReplicaSpec], Launch]:
    """The FAKE ENGINE, except for the models named in ``broken``: their launcher is missing."""

    def launch(spec: ReplicaSpec) -> Launch:
        if spec.model.name in broken:
            return Launch([MISSING, "-c", "0", *fake_launch(spec).argv])
        return fake_launch(spec)

    return launch


@dataclass
class Harness:
    plane: ControlPlane
    tasks: TaskGroup
    redis: aioredis.Redis
    keys: RedisKeys
    path: Path
    base: int

    def state(self, rid: str) -> ReplicaState | None:
        r = [x for x in self.plane.sup.replicas if x.spec.id == rid]
        return r[0].state if r else None

    def replica(self, rid: str) -> Replica:
        return self.plane.sup.find(rid)

    def write(self, models: list[dict[str, Any]]) -> None:
        self.path.write_text(fleet_text(self.base, models))

    def count(self, action: str, model: str, outcome: str) -> float:
        return float(self.plane.metrics.actions.labels(action, model, outcome)._value.get())

    async def ask(self, model: str) -> None:
        await self.redis.set(self.keys.wake_request(model), "test", px=30_000)


@asynccontextmanager
async def control_plane(
    tmp: Path,
    redis_url: str,
    models: list[dict[str, Any]],
    launch: Callable[[ReplicaSpec], Launch],
    options: SupervisorOptions = OPTIONS,
) -> AsyncIterator[Harness]:
    redis = aioredis.Redis.from_url(redis_url)
    keys = RedisKeys(f"ft{uuid.uuid4().hex[:6]}")
    path, base = tmp / "fleet.yaml", free_port()
    path.write_text(fleet_text(base, models))
    async with httpx.AsyncClient(timeout=10) as client:
        plane = build_control_plane(
            RegistryWriter(redis, keys, options.timing), client, options, FleetWatch(path, poll_s=0.05),
            launch, fits, tmp, 1, lambda r: GIB, lambda: 1 << 40, activator=ActivatorOptions(tick_s=0.05),
        )  # fmt: skip
        try:
            async with running(plane) as tasks:
                yield Harness(plane, tasks, redis, keys, path, base)
        finally:
            await redis.aclose()


async def test_a_spawn_error_on_one_model_is_logged_counted_and_the_loop_goes_on(
    tmp_path: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    models = [{"name": "bad"}, {"name": "good"}]
    async with control_plane(tmp_path, redis_url, models, launcher({"bad"})) as h:
        await until(lambda: h.state("good-0") is ReplicaState.READY)
        await until(lambda: h.state("bad-0") is ReplicaState.FAILED)
        assert h.count("start", "bad", "failed") == 1
        assert "FileNotFoundError" in caplog.text and MISSING in caplog.text  # with its traceback
        h.write([*models, {"name": "late"}])
        h.plane.rec.watch.request("SIGHUP")  # a later change still applies
        await until(lambda: h.state("late-0") is ReplicaState.READY)
        assert not h.tasks.died.is_set()


async def test_an_unexpected_error_in_a_wake_leaves_the_replica_asleep_logged_and_counted(
    tmp_path: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    models = [{"name": "od", "activation": "on_demand", "idle_timeout_s": 60}]
    async with control_plane(tmp_path, redis_url, models, launcher({"od"})) as h:
        await until(lambda: h.state("od-0") is ReplicaState.ASLEEP)
        await h.ask("od")
        await until(lambda: h.plane.metrics.wakes.labels("od", "failed")._value.get() == 1)
        assert h.state("od-0") is ReplicaState.ASLEEP  # not WAKING for ever: the next request tries again
        assert "FileNotFoundError" in caplog.text
        assert not h.tasks.died.is_set()


async def test_a_model_removed_during_its_wake_leaves_no_process(tmp_path: Path, redis_url: str) -> None:
    # the wake of "new" must first put "old" to sleep (the budget holds one model), which takes a
    # drain of 1 s: the fleet drops "new" meanwhile
    models = [
        {"name": "old", "activation": "on_demand", "idle_timeout_s": 60, "priority": 10},
        {"name": "new", "activation": "on_demand", "idle_timeout_s": 60, "priority": 90},
    ]
    slow_drain = dataclasses.replace(OPTIONS, timing=RegistryTiming(ttl_s=3, drain_settle_s=1.5))
    async with control_plane(tmp_path, redis_url, models, launcher(set()), slow_drain) as h:
        h.plane.act.budget = lambda: int(1.5 * GIB)  # room for one model at a time
        h.plane.act.measure = lambda pid: GIB
        await until(lambda: h.state("new-0") is ReplicaState.ASLEEP)
        await h.ask("old")
        await until(lambda: h.state("old-0") is ReplicaState.READY)
        port = h.replica("new-0").spec.port
        new = h.replica("new-0")
        await h.ask("new")
        await until(lambda: h.state("old-0") is ReplicaState.DRAINING, deadline_s=10)
        h.write(models[:1])  # "new" removed while its wake makes room
        await until(lambda: new.retired and "new-0" not in {r.spec.id for r in h.plane.sup.replicas})
        await until(lambda: "new" not in h.plane.act.wakes)
        assert not new.process.alive
    assert not new.process.alive
    assert not listening(port)


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def orphan_group() -> tuple[int, int]:
    """A process group whose leader exited, leaving its child (vLLM's engine core) running; returns
    (leader pid, child pid). The leader is not our child, as for an adopted replica."""
    leader_code = (
        "import os,signal\nif os.fork()==0:\n  signal.pause()\nelse:\n  print(os.getpid(),flush=True)\n"
    )
    spawn = (
        "import subprocess,sys\n"
        f"p=subprocess.Popen([sys.executable,'-c',{leader_code!r}],stdout=subprocess.PIPE,"
        "stderr=subprocess.DEVNULL,start_new_session=True)\n"
        "print(p.stdout.readline().decode().strip(),flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", spawn], stdout=subprocess.PIPE, text=True, timeout=30)
    leader = int(out.stdout.split()[0])
    children = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != leader]
    return leader, next(p for p in children if pgid_of(p) == leader)


def pgid_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


async def test_stopping_a_replica_whose_group_leader_is_dead_stops_its_child() -> None:
    leader, child = orphan_group()
    try:
        await until(lambda: not pid_alive(leader), deadline_s=10)  # the leader is gone (reaped by init)
        assert pid_alive(child)
        process = AdoptedProcess(Launch([]), Path(os.devnull), leader, poll_s=0.05)
        await process.stop(1.0)
        await until(lambda: not pid_alive(child), deadline_s=5)
    finally:
        if pid_alive(child):
            os.kill(child, signal.SIGKILL)


async def test_a_drain_whose_metrics_fail_waits_to_the_grace_period(tmp_path: Path, redis_url: str) -> None:
    timing = RegistryTiming(ttl_s=3, drain_settle_s=0.1, drain_poll_s=0.1, drain_grace_s=4)
    options = SupervisorOptions(ready_deadline_s=20, timing=timing)
    model = {"name": "m", "engine": {"extra_args": ["--fault", "metrics-500", "--latency-ms", "1500"]}}
    redis = aioredis.Redis.from_url(redis_url)
    keys = RedisKeys(f"ft{uuid.uuid4().hex[:6]}")
    fleet = parse_fleet(fleet_text(free_port(), [model]))
    spec = ReplicaSpec(fleet.models[0], 0, fleet.defaults.base_port, (0,))
    r = Replica(spec, fake_launch(spec), tmp_path)
    async with httpx.AsyncClient(timeout=30) as client:
        sup = Supervisor([], RegistryWriter(redis, keys, timing), client, options)
        assert await sup.start(r)
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        inflight = asyncio.create_task(client.post(f"{spec.url}/v1/chat/completions", json=body))

        async def in_engine() -> bool:
            return bool((await client.get(f"{spec.url}/stats")).json()["inflight"])

        await until(in_engine)
        await sup.drain()
        response = await inflight
        assert response.status_code == 200  # not cut: /metrics unreadable is not "idle"
    assert not r.process.alive
    await redis.aclose()


async def steady(url: str, model: str, stop: asyncio.Event, every_s: float, statuses: list[int]) -> None:
    """One request every ``every_s`` until ``stop``; each status appended to ``statuses``."""
    body = {"model": model, "messages": [{"role": "user", "content": "x"}]}
    async with httpx.AsyncClient(timeout=30) as c:
        while not stop.is_set():
            statuses.append((await c.post(f"{url}/v1/chat/completions", json=body)).status_code)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)


async def test_steady_traffic_with_admission_off_keeps_an_on_demand_model_awake(
    tmp_path: Path, redis_url: str
) -> None:
    # requests reach the model without a lease or a queue entry (admission off): what runs counts,
    # through the gateways' shared in-flight hash and vLLM's running + waiting
    engine = {"extra_args": ["--latency-ms", "150"]}
    models = [{"name": "od", "activation": "on_demand", "idle_timeout_s": 1.0, "engine": engine}]
    async with control_plane(tmp_path, redis_url, models, launcher(set())) as h:
        await until(lambda: h.state("od-0") is ReplicaState.ASLEEP)
        async with serve_gateway(
            tmp_path, h.path.read_text(), redis_url, h.keys.prefix, admission=False
        ) as gw:
            await h.ask("od")
            await until(lambda: h.state("od-0") is ReplicaState.READY)
            stop, statuses = asyncio.Event(), []
            traffic = asyncio.create_task(steady(gw, "od", stop, 0.3, statuses))
            await until(lambda: len(statuses) >= 12, deadline_s=30)  # several idle timeouts of traffic
            stop.set()
            await traffic
        assert set(statuses) == {200}
        assert h.plane.metrics.sleeps.labels("od", "idle")._value.get() == 0  # never put to sleep
        assert h.state("od-0") is ReplicaState.READY


async def test_a_model_whose_every_replica_failed_answers_503_at_once_naming_the_failure(
    tmp_path: Path, redis_url: str
) -> None:
    models = [{"name": "od", "activation": "on_demand", "idle_timeout_s": 60, "wake_timeout_s": 60}]
    body = {"model": "od", "messages": [{"role": "user", "content": "hi"}]}
    async with control_plane(tmp_path, redis_url, models, launcher(set())) as h:
        await until(lambda: h.state("od-0") is ReplicaState.ASLEEP)
        async with (
            serve_app(tmp_path, h.path.read_text(), redis_url, h.keys.prefix) as (gw, app),
            httpx.AsyncClient(timeout=5) as c,  # far below the model's wake_timeout_s of 60 s
        ):
            await h.ask("od")
            await until(lambda: h.state("od-0") is ReplicaState.READY)
            r = h.replica("od-0")
            pid = r.process.pid
            assert pid is not None
            r.process.launch = Launch([sys.executable, "-c", "raise SystemExit(1)"])  # every restart fails
            os.killpg(pid, signal.SIGKILL)
            await until(lambda: h.state("od-0") is ReplicaState.FAILED)

            pool = app.state.gateway.table.pool("od")
            await until(lambda: [e.record.state for e in pool.endpoints] == [ReplicaState.FAILED])
            answer = await c.post(f"{gw}/v1/chat/completions", json=body)
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        assert error["code"] == "model_unavailable"
        assert "every replica failed" in error["message"] and "restarts in a row failed" in error["message"]
