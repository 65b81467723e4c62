"""A supervisor killed with -9 and started again adopts the replicas it left (FAKE ENGINE replicas, the
shipped CLI through testing/fake_workers.py, a real Redis); what it cannot verify it never
publishes: a stranger on a reused pid is left alone, a silent replica is stopped, a taken port refused."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import uuid
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from contract.fleet import parse_fleet
from contract.redis_keys import RedisKeys
from contract.registry import RegistryWriter, ReplicaState, read_registry
from testing.poll import until
from testing.procs import Proc, free_port, running, spawn, start_fake_engine, wait_until
from tests.workers.test_reconciler import OPTIONS, fleet_yaml
from workers.life.adopt import StateFile, check_entries, entry_for, kill_group, pid_alive
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
