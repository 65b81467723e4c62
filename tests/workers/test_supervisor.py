"""The supervisor with real processes (the FAKE ENGINE stands in for vLLM) and a real Redis."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from llmgw_contract.fleet import parse_fleet
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryTiming, RegistryWriter, ReplicaRecord, ReplicaState, read_model
from testing.poll import until
from testing.procs import free_port
from workers.life.owner import Replica, RestartBackoff, Supervisor, SupervisorOptions
from workers.replica.launch import Launch, ReplicaSpec


def fake_replica(tmp: Path, name: str = "fake", *extra: str, argv: list[str] | None = None) -> Replica:
    model = parse_fleet(f"models:\n - name: {name}\n   source: {{path: /m}}\n").models[0]
    spec = ReplicaSpec(model, 0, free_port(), (0,))
    cmd = argv or [
        sys.executable,
        "-m",
        "testing.fake_engine",
        "--port",
        str(spec.port),
        "--model",
        name,
        *extra,
    ]
    return Replica(spec, Launch(cmd), tmp)


OPTIONS = SupervisorOptions(
    ready_deadline_s=20,
    timing=RegistryTiming(ttl_s=3, drain_grace_s=10),
    backoff=RestartBackoff(base_s=0.2, max_s=1.0),
    max_start_attempts=2,
)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    r = aioredis.Redis.from_url(redis_url)
    yield r
    await r.aclose()


async def record(redis: aioredis.Redis, keys: RedisKeys, rep: Replica) -> ReplicaRecord | None:
    entry = (await read_model(redis, keys, rep.spec.model.name)).get(rep.spec.id)
    return ReplicaRecord.model_validate_json(entry[0]) if entry else None


@pytest.fixture
def keys() -> RedisKeys:
    return RedisKeys(f"sup{uuid.uuid4().hex[:6]}")


def test_restart_backoff_grows_and_resets() -> None:
    b = RestartBackoff(base_s=1, max_s=8, healthy_after_s=60)
    assert [b.delay(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 4, 8, 8]
    assert b.consecutive_after(3, ran_s=5) == 4
    assert b.consecutive_after(3, ran_s=120) == 1


async def test_registers_ready_replica_with_ttl(
    tmp_path: Path, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    rep = fake_replica(tmp_path)
    async with httpx.AsyncClient() as client:
        sup = Supervisor([rep], RegistryWriter(redis, keys, OPTIONS.timing), client, OPTIONS)
        task = asyncio.create_task(sup.run())
        await until(lambda: rep.state is ReplicaState.READY)
        rec = await record(redis, keys, rep)
        assert rec is not None and rec.state is ReplicaState.READY and rec.url == rep.spec.url
        assert 0 < (await read_model(redis, keys, "fake"))[rep.spec.id][1] <= 3000
        await sup.drain()
        await task
    assert await record(redis, keys, rep) is None
    assert not rep.process.alive


async def test_kill_9_is_restarted_with_backoff(
    tmp_path: Path, redis: aioredis.Redis, keys: RedisKeys, caplog: pytest.LogCaptureFixture
) -> None:
    rep = fake_replica(tmp_path)
    async with httpx.AsyncClient() as client:
        sup = Supervisor([rep], RegistryWriter(redis, keys, OPTIONS.timing), client, OPTIONS)
        task = asyncio.create_task(sup.run())
        await until(lambda: rep.state is ReplicaState.READY)
        first_pid = rep.process.pid
        assert first_pid is not None
        os.killpg(first_pid, signal.SIGKILL)
        await until(
            lambda: rep.restarts == 1 and rep.state is ReplicaState.READY and rep.process.pid != first_pid
        )
        assert (await client.get(f"{rep.spec.url}/health")).status_code == 200
        assert "died (exit -9)" in caplog.text and "restart 1 in" in caplog.text
        await sup.drain()
        await task


async def test_drain_lets_inflight_requests_finish(
    tmp_path: Path, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    rep = fake_replica(tmp_path, "fake", "--latency-ms", "2500")
    async with httpx.AsyncClient(timeout=30) as client:
        sup = Supervisor([rep], RegistryWriter(redis, keys, OPTIONS.timing), client, OPTIONS)
        task = asyncio.create_task(sup.run())
        await until(lambda: rep.state is ReplicaState.READY)
        body = {"model": "fake", "messages": [{"role": "user", "content": "x"}]}
        inflight = asyncio.create_task(client.post(f"{rep.spec.url}/v1/chat/completions", json=body))
        await until(lambda: rep.spec.url and True, 1)
        draining = asyncio.create_task(sup.drain())
        await until(lambda: rep.state is ReplicaState.DRAINING)
        rec = await record(redis, keys, rep)
        assert rec is not None and rec.state is ReplicaState.DRAINING
        response = await inflight
        assert response.status_code == 200
        await draining
        await task
    assert not rep.process.alive


async def test_start_failure_is_retried_then_reported(
    tmp_path: Path, redis: aioredis.Redis, keys: RedisKeys, caplog: pytest.LogCaptureFixture
) -> None:
    rep = fake_replica(
        tmp_path, argv=[sys.executable, "-c", "print('CUDA out of memory'); raise SystemExit(3)"]
    )
    async with httpx.AsyncClient() as client:
        sup = Supervisor([rep], RegistryWriter(redis, keys, OPTIONS.timing), client, OPTIONS)
        assert not await sup.start_with_retries(rep)
    assert caplog.text.count("start 1 failed") == 1 and caplog.text.count("start 2 failed") == 1
    assert "exited with code 3" in caplog.text and "CUDA out of memory" in caplog.text
