"""The Kubernetes / compose registration (`python -m contract.sidecar`) and the vLLM container's
preStop drain script, for real: against the FAKE ENGINE (vLLM's /health, /v1/models and /metrics) and a
real Redis."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from contract.drain import drain_argv
from contract.redis_keys import RedisKeys
from contract.registry import RegistryTiming
from testing.procs import Proc, free_port, http_ok, spawn, start_fake_engine, wait_until

MODEL = "fake-chat"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path, "--model", MODEL, "--delay-ms", "100", "--tokens", "10")
    yield proc
    proc.stop()


def start_register(tmp: Path, redis_url: str, prefix: str, engine: Proc, grace_s: float = 5.0) -> Proc:
    record = {"id": f"{MODEL}-pod-1", "model": MODEL, "url": engine.url, "concurrency": 4, "device": "gpu:0"}
    port = free_port()
    argv = [
        sys.executable, "-m", "contract.sidecar", "--record", json.dumps(record),
        "--redis-url", redis_url, "--redis-prefix", prefix, "--ttl", "1.2",
        "--drain-grace", str(grace_s), "--drain-settle", "0.3", "--metrics-port", str(port),
    ]  # fmt: skip
    return spawn(argv, port, tmp / "register.log")


def stored(client: redis.Redis, key: str) -> dict[str, object] | None:
    raw = client.get(key)
    return None if raw is None else dict(json.loads(raw))


def wait_in_flight(engine: Proc) -> None:
    wait_until(lambda: '"inflight": 1' in httpx.get(f"{engine.url}/stats").text, 5, "a request in flight")


def stream_in_background(url: str, tokens: int) -> asyncio.Task[tuple[list[str], float]]:
    """A stream of `tokens` events, 100 ms apart; the task gives its events and when the last arrived."""

    async def run() -> tuple[list[str], float]:
        body = {"stream": True, "max_tokens": tokens}
        async with (
            httpx.AsyncClient(timeout=20) as c,
            c.stream("POST", f"{url}/v1/chat/completions", json=body) as r,
        ):
            events = [line async for line in r.aiter_lines() if line.startswith("data: ")]
            return events, time.monotonic()

    return asyncio.create_task(run())


async def test_publishes_ready_with_ttl_then_drains_on_sigterm(
    tmp_path: Path, redis_url: str, engine: Proc
) -> None:
    prefix = f"reg{uuid.uuid4().hex[:8]}"
    key = RedisKeys(prefix).replica(MODEL, f"{MODEL}-pod-1")
    client = redis.Redis.from_url(redis_url)
    proc = start_register(tmp_path, redis_url, prefix, engine)
    try:
        await asyncio.to_thread(
            wait_until, lambda: (stored(client, key) or {}).get("state") == "ready", 10, "ready record"
        )
        record = stored(client, key)
        assert record is not None and record["url"] == engine.url and record["concurrency"] == 4
        assert 0 < client.pttl(key) <= 2000  # a heartbeat TTL: a dead pod's record goes away by itself
        metrics = (await asyncio.to_thread(httpx.get, f"{proc.url}/metrics", timeout=5)).text
        ready = f'llmgw_supervisor_replica_state{{model="{MODEL}",replica="{MODEL}-pod-1",state="ready"}} 1.0'
        assert ready in metrics

        stream = stream_in_background(engine.url, 30)  # three seconds of tokens in flight
        await asyncio.to_thread(wait_in_flight, engine)
        proc.popen.send_signal(signal.SIGTERM)
        await asyncio.to_thread(
            wait_until, lambda: (stored(client, key) or {}).get("state") == "draining", 5, "draining record"
        )
        assert not stream.done() and proc.popen.poll() is None  # draining while the stream still runs
        events, _ = await stream
        assert events[-1] == "data: [DONE]"
        code = await asyncio.to_thread(proc.popen.wait, 10)
        assert code == 0
        assert client.get(key) is None  # withdrawn once vLLM was idle, well before the grace ran out
    finally:
        proc.stop()
        client.close()


def test_withdraws_a_replica_that_stops_answering(tmp_path: Path, redis_url: str) -> None:
    engine = start_fake_engine(tmp_path, "--model", MODEL)
    prefix = f"reg{uuid.uuid4().hex[:8]}"
    key = RedisKeys(prefix).replica(MODEL, f"{MODEL}-pod-1")
    client = redis.Redis.from_url(redis_url)
    proc = start_register(tmp_path, redis_url, prefix, engine)
    try:
        wait_until(lambda: client.get(key) is not None, 10, "ready record")
        engine.kill()
        wait_until(lambda: client.get(key) is None, 5, "record withdrawn")
        wait_until(lambda: http_ok(f"{proc.url}/metrics"), 5, "metrics")
        assert 'state="starting"} 1.0' in httpx.get(f"{proc.url}/metrics", timeout=5).text
    finally:
        proc.stop()
        engine.stop()
        client.close()


def drain(url: str, grace_s: float, settle_s: float = 0.2) -> float:
    """Run the preStop script as the kubelet would; returns the seconds it took."""
    started = time.monotonic()
    argv = drain_argv(sys.executable, url, RegistryTiming(drain_settle_s=settle_s, drain_grace_s=grace_s))
    subprocess.run(argv, check=True, timeout=30)
    return time.monotonic() - started


async def test_prestop_drain_waits_for_in_flight_work_within_the_grace(engine: Proc) -> None:
    idle = await asyncio.to_thread(drain, engine.url, 10.0)
    assert idle < 2.0  # nothing running: only the settle time

    stream = stream_in_background(engine.url, 20)
    await asyncio.to_thread(wait_in_flight, engine)
    await asyncio.to_thread(drain, engine.url, 10.0)
    drained = time.monotonic()
    events, ended = await stream
    assert events[-1] == "data: [DONE]"
    assert ended - 0.3 < drained < ended + 3.0  # it returned once the stream had ended, not before

    async with httpx.AsyncClient(timeout=20) as c:
        hang = {"x-fake-fault": "hang"}
        hung = asyncio.create_task(c.post(f"{engine.url}/v1/completions", json={}, headers=hang))
        await asyncio.to_thread(wait_in_flight, engine)
        capped = await asyncio.to_thread(drain, engine.url, 1.5)
        hung.cancel()
    assert 1.4 < capped < 4.0  # a request that never ends does not hold the pod past the grace period


def test_announces_a_ready_replica_once_on_the_model_state_channel(
    tmp_path: Path, redis_url: str, engine: Proc
) -> None:
    """A pod scaled up from zero (KEDA) is announced, so waiting requests go on without the next poll."""
    prefix = f"reg{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    pubsub = client.pubsub()
    pubsub.subscribe(RedisKeys(prefix).state_channel)
    proc = start_register(tmp_path, redis_url, prefix, engine)
    try:
        notices: list[bytes] = []

        def announced() -> bool:
            msg = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
            if msg is not None and msg["type"] == "message":
                notices.append(msg["data"])
            return bool(notices)

        wait_until(announced, 10, "the ready notice")
        assert notices == [MODEL.encode()]
        key = RedisKeys(prefix).replica(MODEL, f"{MODEL}-pod-1")
        assert (stored(client, key) or {}).get("state") == "ready"
        # the heartbeats after it (one each 0.4 s, TTL 1.2 s) refresh the record without announcing it again
        assert pubsub.get_message(timeout=1.5) is None and client.pttl(key) > 0
    finally:
        proc.stop()
        pubsub.close()
        client.close()
