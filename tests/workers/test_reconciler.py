"""The reconcile loop with real processes (the FAKE ENGINE, testing/fake_engine.py, stands in for vLLM:
the fleet's ``engine.extra_args`` become its flags) and a real Redis: add, scale, remove, replace (beside
and stop-first), a replace that cannot start, an invalid file, a change during a pass, a crash loop, and
a Redis restart."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from llmgw_contract.fleet_file import FleetWatch
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryTiming, RegistryWriter, ReplicaRecord, ReplicaState, read_registry
from llmgw_contract.replica_metrics import SupervisorMetrics
from testing.fake_workers import fake_launch
from testing.poll import until
from testing.procs import free_port, start_redis
from workers.converge.headroom import Headroom
from workers.converge.loop import Reconciler
from workers.life.owner import Replica, RestartBackoff, Supervisor, SupervisorOptions
from workers.replica.launch import Launch, ReplicaSpec

OPTIONS = SupervisorOptions(
    ready_deadline_s=20,
    timing=RegistryTiming(ttl_s=3, drain_settle_s=0.2, drain_grace_s=5),
    backoff=RestartBackoff(base_s=0.05, max_s=0.2, give_up_after=3),
    max_start_attempts=1,
    redis_check_s=0.1,
)


def fleet_yaml(base: int, models: dict[str, tuple[int, list[str]]]) -> str:
    lines = [f"defaults: {{base_port: {base}}}", "models:"]
    for name, (n, extra) in models.items():
        lines += [f"  - name: {name}", f"    source: {{path: /{name}}}", f"    replicas: {n}"]
        lines.append(f"    engine: {{extra_args: {extra!r}}}")
    return "\n".join(lines) + "\n"


@pytest.fixture(autouse=True)
def info_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)


async def fits(_: ReplicaSpec) -> Headroom:
    return Headroom(1 << 40, 1)


async def no_room(_: ReplicaSpec) -> Headroom:
    return Headroom(0, 1)


@dataclass
class Loop:
    sup: Supervisor
    rec: Reconciler
    path: Path
    base: int
    redis: aioredis.Redis
    keys: RedisKeys
    metrics: SupervisorMetrics

    def write(self, models: dict[str, tuple[int, list[str]]]) -> None:
        self.path.write_text(fleet_yaml(self.base, models))

    def ready(self) -> dict[str, Replica]:
        return {r.spec.id: r for r in self.sup.replicas if r.state is ReplicaState.READY}

    async def published_ready(self) -> set[str]:
        """The ids published READY, once they are exactly the replicas ready here."""
        published = {k for k, r in (await self.published()).items() if r.state is ReplicaState.READY}
        return published if published == set(self.ready()) else set()

    async def published(self) -> dict[str, ReplicaRecord]:
        return {r.id: r for r in await read_registry(self.redis, self.keys)}

    def actions(self, action: str, model: str, outcome: str) -> float:
        return self.metrics.actions.labels(action, model, outcome)._value.get()


@asynccontextmanager
async def reconciling(
    tmp: Path,
    redis_url: str,
    models: dict[str, tuple[int, list[str]]],
    headroom: Callable[[ReplicaSpec], Awaitable[Headroom]] = fits,
) -> AsyncIterator[Loop]:
    redis = aioredis.Redis.from_url(redis_url)
    keys = RedisKeys(f"rec{uuid.uuid4().hex[:6]}")
    metrics = SupervisorMetrics()
    path = tmp / "fleet.yaml"
    base = free_port()
    path.write_text(fleet_yaml(base, models))
    async with httpx.AsyncClient(timeout=10) as client:
        sup = Supervisor([], RegistryWriter(redis, keys, OPTIONS.timing), client, OPTIONS, metrics=metrics)
        rec = Reconciler(sup, FleetWatch(path, poll_s=0.05), fake_launch, headroom, tmp, 1, metrics)
        running = asyncio.create_task(sup.run())
        loop = asyncio.create_task(rec.run())
        try:
            yield Loop(sup, rec, path, base, redis, keys, metrics)
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
            await sup.drain()
            await running
            await redis.aclose()


async def test_add_scale_and_remove_keep_running_ports(tmp_path: Path, redis_url: str) -> None:
    async with reconciling(tmp_path, redis_url, {"a": (1, [])}) as lp:
        await until(lambda: "a-0" in lp.ready())
        a0 = lp.ready()["a-0"]
        port, pid, instance = a0.spec.port, a0.process.pid, a0.instance
        lp.write({"b": (1, []), "a": (2, [])})  # a model added before a, and a scaled up
        await until(lambda: {"a-0", "a-1", "b-0"} <= lp.ready().keys())
        assert (a0.spec.port, a0.process.pid, a0.instance) == (port, pid, instance)
        assert len({r.spec.port for r in lp.sup.replicas}) == 3
        await until(lambda: lp.published_ready(), 10)
        lp.write({"b": (1, []), "a": (1, [])})
        await until(lambda: "a-1" not in lp.ready() and len(lp.sup.replicas) == 2)
        lp.write({"a": (1, [])})
        await until(lambda: [r.spec.id for r in lp.sup.replicas] == ["a-0"])
        await until(lambda: lp.actions("stop", "b", "ok") == 1)
        assert set(await lp.published()) == {"a-0"}
        assert a0.process.pid == pid
        assert lp.actions("start", "a", "ok") == 2 and lp.actions("start", "b", "ok") == 1
        assert lp.actions("stop", "a", "ok") == 1


async def test_replace_starts_the_new_replica_beside_the_old_then_stops_it(
    tmp_path: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with reconciling(tmp_path, redis_url, {"a": (1, [])}) as lp:
        await until(lambda: "a-0" in lp.ready())
        old = lp.ready()["a-0"]
        lp.write({"a": (1, ["--tokens", "4"])})
        await until(lambda: list(lp.ready()) == ["a-1"] and len(lp.sup.replicas) == 1)
        new = lp.ready()["a-1"]
        assert new.spec.port != old.spec.port and new.instance != old.instance
        assert not old.process.alive
        assert set(await lp.published()) == {"a-1"}
        await until(lambda: lp.actions("replace", "a", "ok") == 1)
        assert "order=beside" in caplog.text and "engine changed" in caplog.text
        assert "a-1 serves in place of a-0" in caplog.text


async def test_replace_without_room_stops_the_old_first_and_says_so(
    tmp_path: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with reconciling(tmp_path, redis_url, {"a": (1, [])}, headroom=no_room) as lp:
        await until(lambda: "a-0" in lp.ready())
        lp.write({"a": (1, ["--tokens", "4"])})
        await until(lambda: list(lp.ready()) == ["a-1"] and len(lp.sup.replicas) == 1)
        assert "order=stop-first" in caplog.text and "not enough memory for both" in caplog.text


async def test_a_replace_that_cannot_start_leaves_the_old_replica_serving(
    tmp_path: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with reconciling(tmp_path, redis_url, {"a": (1, [])}) as lp:
        await until(lambda: "a-0" in lp.ready())
        old = lp.ready()["a-0"]
        pid = old.process.pid
        lp.write({"a": (1, ["--no-such-flag"])})
        await until(lambda: lp.actions("replace", "a", "failed") == 1)
        await until(lambda: not lp.rec.watch.wanted.is_set() and lp.rec.passes >= 2)
        assert [r.spec.id for r in lp.sup.replicas] == ["a-0"]
        assert old.state is ReplicaState.READY and old.process.pid == pid
        rec = (await lp.published())["a-0"]
        assert rec.state is ReplicaState.READY
        async with httpx.AsyncClient() as c:
            assert (await c.get(f"{old.spec.url}/health")).status_code == 200
        assert "did not start; a-0 keeps serving" in caplog.text
        assert lp.actions("replace", "a", "failed") == 1  # refused, not retried in a loop
        lp.rec.watch.request("SIGHUP")  # an explicit re-read tries again
        await until(lambda: lp.actions("replace", "a", "failed") == 2)
        assert old.state is ReplicaState.READY and old.process.pid == pid


async def test_stop_first_replace_that_cannot_start_brings_the_old_configuration_back(
    tmp_path: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with reconciling(tmp_path, redis_url, {"a": (1, [])}, headroom=no_room) as lp:
        await until(lambda: "a-0" in lp.ready())
        port = lp.ready()["a-0"].spec.port
        lp.write({"a": (1, ["--no-such-flag"])})
        await until(lambda: lp.actions("replace", "a", "failed") == 1)
        await until(lambda: "a-0" in lp.ready())
        assert lp.ready()["a-0"].spec.port == port
        assert "starting the old configuration again" in caplog.text


async def test_an_invalid_file_is_refused_and_the_fleet_keeps_serving(
    tmp_path: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with reconciling(tmp_path, redis_url, {"a": (1, [])}) as lp:
        await until(lambda: "a-0" in lp.ready())
        lp.path.write_text(fleet_yaml(lp.base, {"a": (1, [])}).replace("replicas: 1", "replicas: -1"))
        await until(lambda: lp.metrics.fleet_reloads.labels("refused")._value.get() == 1)
        assert "fleet change refused, the running fleet keeps serving" in caplog.text
        assert "models.0.replicas" in caplog.text
        assert list(lp.ready()) == ["a-0"] and lp.ready()["a-0"].process.alive
        lp.write({"a": (2, [])})
        await until(lambda: {"a-0", "a-1"} <= lp.ready().keys())


async def test_a_change_during_a_pass_is_taken_by_the_next_pass(tmp_path: Path, redis_url: str) -> None:
    async with reconciling(tmp_path, redis_url, {"a": (1, [])}) as lp:
        await until(lambda: lp.sup.replicas and lp.sup.replicas[0].state is ReplicaState.STARTING)
        lp.write({"a": (1, []), "b": (1, [])})  # while a-0 is still starting
        await until(lambda: {"a-0", "b-0"} <= lp.ready().keys())


async def test_sighup_request_rereads_the_file(tmp_path: Path, redis_url: str) -> None:
    async with reconciling(tmp_path, redis_url, {"a": (1, [])}) as lp:
        await until(lambda: "a-0" in lp.ready())
        applied = lp.metrics.fleet_reloads.labels("applied")._value.get()
        lp.rec.watch.request("SIGHUP")
        await until(lambda: lp.metrics.fleet_reloads.labels("applied")._value.get() == applied + 1)
        assert list(lp.ready()) == ["a-0"]


async def test_a_crash_loop_is_bounded_and_ends_failed(
    tmp_path: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    spawns = tmp_path / "spawns"
    failing = Launch([sys.executable, "-c", f"open({str(spawns)!r}, 'a').write('x'); raise SystemExit(1)"])
    async with reconciling(tmp_path, redis_url, {"a": (1, [])}) as lp:
        await until(lambda: "a-0" in lp.ready())
        rep = lp.ready()["a-0"]
        assert rep.process.pid is not None
        rep.process.launch = failing  # every start from now on fails
        os.killpg(rep.process.pid, signal.SIGKILL)
        await until(lambda: rep.state is ReplicaState.FAILED)
        give_up = OPTIONS.backoff.give_up_after
        assert len(spawns.read_text()) == give_up * OPTIONS.max_start_attempts
        assert rep.restarts == give_up
        assert f"gave up after {give_up} consecutive failed restarts" in caplog.text
        assert lp.actions("restart", "a", "gave_up") == 1
        watcher = rep.watcher
        assert watcher is not None
        await until(watcher.done)  # it sets FAILED (published to Redis), then returns
        assert watcher.exception() is None
        lp.rec.watch.request("SIGHUP")  # the operator asks again: a new replica in its slot
        await until(lambda: list(lp.ready()) == ["a-1"] and list(lp.sup.replicas) == [lp.ready()["a-1"]])
        assert lp.ready()["a-1"].slot == 0  # a new id and port: a-0's may still be held by a gateway


async def test_redis_restart_republishes_every_replica_at_once(tmp_path: Path) -> None:
    port = free_port()
    server = start_redis(tmp_path / "r1", port)
    try:
        async with reconciling(tmp_path, f"redis://127.0.0.1:{port}/0", {"a": (2, [])}) as lp:
            await until(lambda: len(lp.ready()) == 2)
            await until(lambda: lp.published())
            server.kill()
            server = start_redis(tmp_path / "r2", port)
            await until(lambda: lp.sup.republished == 1, 10)
            assert set(await lp.published()) == {"a-0", "a-1"}
            assert lp.metrics.republished._value.get() == 1
    finally:
        server.stop()
