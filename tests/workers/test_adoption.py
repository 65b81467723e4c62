"""A supervisor killed with -9 and started again adopts the replicas it left (FAKE ENGINE replicas, the
shipped CLI through testing/fake_workers.py, a real Redis); what it cannot verify it never
publishes: a stranger on a reused pid is left alone, a silent replica is stopped, a taken port refused."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import uuid
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from llmgw_contract.fleet import parse_fleet
from llmgw_contract.fleet_file import FleetWatch
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryWriter, ReplicaState, read_registry
from testing.fake_workers import fake_launch
from testing.poll import until
from testing.procs import Proc, free_port, running, spawn, start_fake_engine, wait_until
from tests.workers.test_faults import orphan_group
from tests.workers.test_reconciler import OPTIONS, fits, fleet_yaml
from workers.converge.loop import Reconciler
from workers.life.adopt import StateFile, check_entries, entry_for, group_alive, kill_group, pid_alive
from workers.life.owner import Replica, Supervisor
from workers.replica.launch import Launch, ReplicaSpec


def supervisor(tmp: Path, redis_url: str, prefix: str, fleet: Path, state: Path) -> Proc:
    argv = [sys.executable, "-m", "testing.fake_workers", "--fleet", str(fleet)]
    argv += ["--redis-url", redis_url, "--redis-prefix", prefix, "--log-dir", str(tmp / "logs")]
    argv += ["--state-file", str(state), "--metrics-port", str(free_port()), "--devices", "1"]
    argv += ["--drain-grace", "3"]
    return spawn(argv, 0, tmp / "workers.log")


async def ready_ids(redis: aioredis.Redis, keys: RedisKeys) -> dict[str, str]:
    """Replica id -> instance, of the records published READY."""
    return {r.id: r.instance for r in await read_registry(redis, keys) if r.state is ReplicaState.READY}


async def load(urls: list[str], stop: asyncio.Event) -> tuple[int, int]:
    """Requests straight to the replicas until stopped: (answered 200, failed)."""
    ok = failed = 0
    body = {"model": "a", "messages": [{"role": "user", "content": "x"}]}
    async with httpx.AsyncClient(timeout=5) as c:
        while not stop.is_set():
            for u in urls:
                try:
                    r = await c.post(f"{u}/v1/chat/completions", json=body)
                    ok, failed = (ok + 1, failed) if r.status_code == 200 else (ok, failed + 1)
                except httpx.HTTPError:
                    failed += 1
            await asyncio.sleep(0.01)
    return ok, failed


async def test_a_supervisor_killed_with_9_is_restarted_and_adopts_its_replicas(
    tmp_path: Path, redis_url: str
) -> None:
    prefix, fleet, state = f"ad{uuid.uuid4().hex[:6]}", tmp_path / "fleet.yaml", tmp_path / "state.json"
    fleet.write_text(fleet_yaml(free_port(), {"a": (2, [])}))
    keys = RedisKeys(prefix)
    redis = aioredis.Redis.from_url(redis_url)
    first = supervisor(tmp_path, redis_url, prefix, fleet, state)
    second: Proc | None = None
    try:
        await until(lambda: _count(ready_ids(redis, keys), 2))
        before = await ready_ids(redis, keys)
        entries = {e["id"]: e for e in json.loads(state.read_text())}
        assert set(entries) == {"a-0", "a-1"}
        urls = [f"http://127.0.0.1:{e['port']}" for e in entries.values()]
        stop = asyncio.Event()
        traffic = asyncio.create_task(load(urls, stop))
        first.kill(signal.SIGKILL)
        assert all(pid_alive(e["pid"]) for e in entries.values())  # the models outlive the supervisor
        second = supervisor(tmp_path, redis_url, prefix, fleet, state)
        await until(lambda: "adopting replica=a-1" in (tmp_path / "workers.log").read_text())
        await until(lambda: _count(ready_ids(redis, keys), 2))
        stop.set()
        ok, failed = await traffic
        assert failed == 0 and ok > 0
        assert await ready_ids(redis, keys) == before  # same ids, same instances: adopted, not restarted
        pids = {k: e["pid"] for k, e in entries.items()}  # the log names a-1 before its adoption ends:
        await until(lambda: {e["id"]: e["pid"] for e in json.loads(state.read_text())} == pids)  # poll
        second.kill(signal.SIGTERM)
        second = None
        wait_until(lambda: not any(pid_alive(e["pid"]) for e in entries.values()), 60, "replicas stopped")
        assert json.loads(state.read_text()) == []
    finally:
        for p in (first, second):
            if p is not None:
                p.stop()
        for e in StateFile(state).load():  # left over only when the test failed
            kill_group(e.pid, signal.SIGKILL)
        await redis.aclose()


def members(pgid: int) -> set[int]:
    """The live processes of a process group."""
    found = set()
    for p in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        with contextlib.suppress(OSError):
            if os.getpgid(p) == pgid and pid_alive(p):
                found.add(p)
    return found


def starting_entry(state: Path) -> dict[str, object] | None:
    """The state file's entry of a replica still starting, once there is one."""
    with contextlib.suppress(OSError, ValueError):
        return next((e for e in json.loads(state.read_text()) if e.get("state") == "starting"), None)
    return None


async def test_a_supervisor_killed_while_a_replica_starts_leaves_it_recorded_and_the_next_stops_its_group(
    tmp_path: Path, redis_url: str
) -> None:
    """A replica that starts for minutes (vLLM on a GPU) is in the state file from its spawn on, with its
    process group; killed with -9 meanwhile, the supervisor leaves it and its engine core running, and
    the next supervisor stops the whole group (no orphan) before it starts the replica anew."""
    prefix, fleet, state = f"st{uuid.uuid4().hex[:6]}", tmp_path / "fleet.yaml", tmp_path / "state.json"
    base = free_port()
    fleet.write_text(fleet_yaml(base, {"a": (1, ["--start-delay-s", "600", "--engine-core"])}))
    keys = RedisKeys(prefix)
    redis = aioredis.Redis.from_url(redis_url)
    first = supervisor(tmp_path, redis_url, prefix, fleet, state)
    second: Proc | None = None
    group: set[int] = set()
    try:
        entry = await until(lambda: starting_entry(state), what="the starting replica in the state file")
        assert isinstance(entry, dict)
        leader = int(entry["pid"])
        assert entry["pgid"] == leader and entry["id"] == "a-0"
        await until(lambda: len(members(leader)) == 2, what="the engine core forked")
        group = members(leader)
        first.kill(signal.SIGKILL)
        assert members(leader) == group  # the replica and its engine core outlive their supervisor
        fleet.write_text(fleet_yaml(base, {"a": (1, [])}))
        second = supervisor(tmp_path, redis_url, prefix, fleet, state)
        await until(lambda: not group_alive(leader), 30, "the whole group of the starting replica stopped")
        assert "was still starting: stopping it (its whole group)" in (tmp_path / "workers.log").read_text()
        await until(lambda: _count(ready_ids(redis, keys), 1))  # started anew, from the fleet
        second.kill(signal.SIGTERM)
        second = None
        await until(lambda: json.loads(state.read_text()) == [], 30, "the state file emptied")
    finally:
        for p in (first, second):
            if p is not None:
                p.stop()
        for pid in group:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for e in StateFile(state).load():
            kill_group(e.pid, signal.SIGKILL)
        await redis.aclose()


async def test_an_entry_whose_leader_died_has_its_live_group_stopped_not_forgotten(
    caplog: pytest.LogCaptureFixture,
) -> None:
    leader, core = orphan_group()  # the API server is gone, its engine core (the GPU memory) lives
    try:
        await until(lambda: not pid_alive(leader), deadline_s=10)
        assert pid_alive(core)
        async with httpx.AsyncClient() as c:
            assert await check_entries([entry_for(spec_for("a", free_port()), 0, leader, "i1")], c) == []
        assert not pid_alive(core)  # stopped and waited for: never an orphan
        assert "its leader is dead, its process group lives on: stopping it" in caplog.text
    finally:
        if pid_alive(core):
            os.kill(core, signal.SIGKILL)


async def test_a_replica_is_in_the_state_file_before_its_spawn_and_with_its_pid_right_after(
    tmp_path: Path, redis_url: str
) -> None:
    """No moment where a process runs that the state file does not name: before the fork an entry says
    a spawn is under way (no pid yet), as soon as the spawn returns it carries the pid."""
    saved: list[list[tuple[str, int]]] = []
    redis = aioredis.Redis.from_url(redis_url)
    keys = RedisKeys(f"sp{uuid.uuid4().hex[:6]}")
    r = Replica(spec_for("a", free_port()), Launch([sys.executable, "-c", PAUSE, "a"]), tmp_path)
    async with httpx.AsyncClient() as c:
        sup = Supervisor(
            [], RegistryWriter(redis, keys, OPTIONS.timing), c, OPTIONS,
            on_change=lambda _: saved.append([(e.state, e.pid) for e in rec.entries()]),
        )  # fmt: skip
        rec = Reconciler(sup, FleetWatch(tmp_path / "fleet.yaml"), fake_launch, fits, tmp_path, 1)
        sup.list(r)
        try:
            await r.process.start()
            assert saved == [[("spawning", 0)], [("starting", r.process.pid)]]
        finally:
            await r.process.stop(1.0)
    await redis.aclose()


PAUSE = "import os, signal; os.fork(); signal.pause()"  # a leader and its child, until stopped


async def test_an_entry_written_before_its_spawn_has_the_process_found_by_its_command_and_stopped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The supervisor died between the fork and the entry with the pid: the process is found by its
    command line (its port, its model) and its whole group stopped."""
    port = free_port()
    spawned = spawn([sys.executable, "-c", PAUSE, "--port", str(port), "a"], 0, tmp_path / "p.log")
    stranger = spawn([sys.executable, "-c", PAUSE, "--port", str(free_port()), "a"], 0, tmp_path / "x.log")
    leader = spawned.popen.pid
    try:
        await until(lambda: len(members(leader)) == 2, what="the child forked")
        group = members(leader)
        async with httpx.AsyncClient() as c:
            intent = entry_for(spec_for("a", port), 0, 0, "i1", "spawning")
            assert await check_entries([intent], c) == []
        await until(lambda: not any(pid_alive(p) for p in group), 10, "the whole group stopped")
        assert "was being spawned" in caplog.text
        assert len(members(stranger.popen.pid)) == 2  # another port: not ours, left alone
    finally:
        for p in (spawned, stranger):
            p.kill(signal.SIGKILL)


async def _count(ids: object, n: int) -> bool:
    return len(await ids) == n  # type: ignore[misc, arg-type]


def spec_for(name: str, port: int) -> ReplicaSpec:
    return ReplicaSpec(
        parse_fleet(f"models:\n - name: {name}\n   source: {{path: /m}}\n").models[0], 0, port, (0,)
    )


async def test_only_verified_processes_are_adopted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    silent_port, stranger_port = free_port(), free_port()
    script = "import signal; signal.pause()"  # a process that lives until it is stopped, serving nothing
    silent = spawn([sys.executable, "-c", script, "--port", str(silent_port), "a"], 0, tmp_path / "s.log")
    stranger = spawn([sys.executable, "-c", script], 0, tmp_path / "x.log")
    with running(start_fake_engine(tmp_path, "--model", "a")) as engine, running(silent), running(stranger):
        entries = [
            entry_for(spec_for("a", engine.port), 0, engine.popen.pid, "i1"),
            entry_for(spec_for("a", silent_port), 1, silent.popen.pid, "i2"),
            entry_for(spec_for("a", stranger_port), 2, stranger.popen.pid, "i3"),
            entry_for(spec_for("a", free_port()), 3, 2**22 + 7, "i4"),
        ]
        async with httpx.AsyncClient() as c:
            kept = await check_entries(entries, c)
        assert [e.instance for e in kept] == ["i1"]
        wait_until(lambda: silent.popen.poll() is not None, 10, "the silent replica stopped")
        assert stranger.popen.poll() is None  # a reused pid is someone else's: left alone
        assert "does not answer: stopping it" in caplog.text


async def test_a_port_already_taken_is_never_started_nor_published(
    tmp_path: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with running(start_fake_engine(tmp_path, "--model", "a")) as orphan:
        spec = spec_for("a", orphan.port)
        argv = [sys.executable, "-m", "testing.fake_engine", "--port", str(orphan.port), "--model", "a"]
        rep = Replica(spec, Launch(argv), tmp_path)
        keys = RedisKeys(f"pt{uuid.uuid4().hex[:6]}")
        redis = aioredis.Redis.from_url(redis_url)
        async with httpx.AsyncClient() as c:
            sup = Supervisor([rep], RegistryWriter(redis, keys, OPTIONS.timing), c, OPTIONS)
            assert not await sup.start_with_retries(rep)
        assert await read_registry(redis, keys) == []
        assert rep.process.proc is None and "already taken by another process" in caplog.text
        await redis.aclose()


def test_the_state_file_round_trips_each_replica(tmp_path: Path) -> None:
    spec = spec_for("a", 8100)
    f = StateFile(tmp_path / "state.json")
    assert f.load() == []
    f.save([entry_for(spec, 3, 1234, "i")])
    (e,) = f.load()
    assert e.spec() == spec and (e.slot, e.pid, e.instance) == (3, 1234, "i")
    (tmp_path / "state.json").write_text("{not json")
    assert f.load() == []
