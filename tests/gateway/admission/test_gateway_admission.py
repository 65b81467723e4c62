"""Admission through real gateways in front of the FAKE ENGINE: the capacity invariant across two gateways,
429s in OpenAI's shape, a disconnecting client, a gateway killed with -9, Redis restarted mid-load."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from gateway.admission.base import Ticket
from gateway.admission.redis_queue import RedisAdmission
from gateway.redis_clients import blocking_client, fast_client
from llmgw_contract.redis_keys import RedisKeys
from testing.gateway import fleet_yaml, register, serve_gateway, wait_ready
from testing.poll import until
from testing.procs import Proc, free_port, running, spawn, start_fake_engine, start_redis

MODEL = "m"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def fleet(max_queue: int = 256, max_wait_s: float = 30.0) -> str:
    return fleet_yaml(
        [
            {
                "name": MODEL,
                "source": {"path": "/nonexistent"},
                "policy": "round_robin",
                "max_queue": max_queue,
                "max_queue_wait_s": max_wait_s,
            }
        ]
    )


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"), "--latency-ms", "20")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def slow_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("slow"), "--latency-ms", "30000")
    yield proc
    proc.stop()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        yield client


async def reset_stats(http: httpx.AsyncClient, engine: Proc) -> None:
    await http.get(f"{engine.url}/stats/reset")


async def stats(http: httpx.AsyncClient, engine: Proc) -> dict[str, Any]:
    out: dict[str, Any] = (await http.get(f"{engine.url}/stats")).json()
    return out


def assert_429(r: httpx.Response, code: str) -> dict[str, Any]:
    assert r.status_code == 429, r.text
    err: dict[str, Any] = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code and err["type"] == "rate_limit_error"
    assert int(r.headers["retry-after"]) >= 1
    return err


async def queue_len(redis_url: str, prefix: str) -> int:
    r = aioredis.Redis.from_url(redis_url)
    try:
        return int(await r.zcard(RedisKeys(prefix).queue(MODEL)))
    finally:
        await r.aclose()


async def test_two_gateways_never_exceed_capacity(
    tmp_path: Path, redis_url: str, prefix: str, engine: Proc, http: httpx.AsyncClient
) -> None:
    await register(redis_url, prefix, MODEL, engine.url, "r0", concurrency=4)
    await reset_stats(http, engine)
    async with (
        serve_gateway(tmp_path, fleet(), redis_url, prefix) as g1,
        serve_gateway(tmp_path, fleet(), redis_url, prefix) as g2,
    ):
        urls = [g1, g2]
        rs = await asyncio.gather(
            *(
                http.post(f"{urls[i % 2]}/v1/chat/completions", json=BODY, headers={"x-request-id": f"r{i}"})
                for i in range(160)
            )
        )
    assert Counter(r.status_code for r in rs) == {200: 160}
    assert len({r.headers["x-request-id"] for r in rs}) == 160
    s = await stats(http, engine)
    assert s["peak"] <= 4 and s["served"] == 160


async def test_queue_full_and_wait_exceeded_are_429s(
    tmp_path: Path, redis_url: str, prefix: str, slow_engine: Proc, http: httpx.AsyncClient
) -> None:
    await register(redis_url, prefix, MODEL, slow_engine.url, "r0", concurrency=1)
    async with serve_gateway(tmp_path, fleet(max_queue=1, max_wait_s=0.5), redis_url, prefix) as gw:
        running = asyncio.create_task(http.post(f"{gw}/v1/chat/completions", json=BODY))
        await until(lambda: _leases(redis_url, prefix, 1))
        queued = asyncio.create_task(http.post(f"{gw}/v1/chat/completions", json=BODY))
        await until(lambda: _queued(redis_url, prefix, 1))
        full = await http.post(f"{gw}/v1/chat/completions", json=BODY)
        assert "full" in assert_429(full, "queue_full")["message"]
        err = assert_429(await queued, "queue_timeout")
        assert err["message"].startswith("waited 0.") and "limit 0.5 s" in err["message"]
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def _leases(redis_url: str, prefix: str, n: int) -> bool:
    r = aioredis.Redis.from_url(redis_url)
    try:
        return bool(await r.zcard(RedisKeys(prefix).leases(MODEL)) == n)
    finally:
        await r.aclose()


async def _queued(redis_url: str, prefix: str, n: int) -> bool:
    return await queue_len(redis_url, prefix) == n


async def test_client_disconnect_leaves_the_queue(
    tmp_path: Path, redis_url: str, prefix: str, slow_engine: Proc, http: httpx.AsyncClient
) -> None:
    await register(redis_url, prefix, MODEL, slow_engine.url, "r0", concurrency=1)
    async with serve_gateway(tmp_path, fleet(), redis_url, prefix) as gw:
        running = asyncio.create_task(http.post(f"{gw}/v1/chat/completions", json=BODY))
        await until(lambda: _leases(redis_url, prefix, 1))
        async with httpx.AsyncClient(timeout=30) as impatient:
            waiting = asyncio.create_task(impatient.post(f"{gw}/v1/chat/completions", json=BODY))
            await until(lambda: _queued(redis_url, prefix, 1))
            waiting.cancel()  # closes its connection
            await asyncio.gather(waiting, return_exceptions=True)
        await until(lambda: _queued(redis_url, prefix, 0), deadline_s=1.0)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


def gateway_bin() -> str:
    return str(Path(sys.executable).parent / "llmgw-gateway")


def spawn_gateway(tmp: Path, redis_url: str, prefix: str, ttl_s: float) -> Proc:
    fleet_file = tmp / "fleet-sub.yaml"
    fleet_file.write_text(fleet())
    port = free_port()
    env = {
        "LLMGW_FLEET_FILE": str(fleet_file),
        "LLMGW_REDIS_URL": redis_url,
        "LLMGW_REDIS_PREFIX": prefix,
        "LLMGW_LEASE_TTL_S": str(ttl_s),
        "LLMGW_REGISTRY_POLL_S": "0.2",
        "LLMGW_GATEWAY_ID": "doomed",
    }
    return spawn([gateway_bin(), "--port", str(port)], port, tmp / "gateway-sub.log", env)


async def test_leases_of_a_killed_gateway_come_back_within_the_ttl(
    tmp_path: Path, redis_url: str, prefix: str, slow_engine: Proc, http: httpx.AsyncClient
) -> None:
    ttl = 1.5
    await register(redis_url, prefix, MODEL, slow_engine.url, "r0", concurrency=2)
    proc = spawn_gateway(tmp_path, redis_url, prefix, ttl)
    survivor = RedisAdmission(
        fast_client(redis_url, 1.0), blocking_client(redis_url, 1.0, 8), RedisKeys(prefix), "survivor", ttl
    )
    await survivor.start()
    try:
        await wait_ready(http, proc.url, deadline_s=20)
        hung = [
            asyncio.create_task(http.post(f"{proc.url}/v1/chat/completions", json=BODY)) for _ in range(2)
        ]
        await until(lambda: _leases(redis_url, prefix, 2))
        os.killpg(proc.popen.pid, signal.SIGKILL)
        killed = time.monotonic()
        lease, _ = await asyncio.wait_for(survivor.acquire(Ticket("s", MODEL, "t", 0, 1, 10, 10), 2), 10)
        assert time.monotonic() - killed < ttl + 1.0
        await lease.release()
        await asyncio.gather(*hung, return_exceptions=True)
    finally:
        proc.stop()
        await survivor.stop()


async def test_redis_stopped_and_restarted_mid_load(
    tmp_path: Path, prefix: str, engine: Proc, http: httpx.AsyncClient
) -> None:
    redis_proc = start_redis(tmp_path / "redis")
    url = f"redis://127.0.0.1:{redis_proc.port}/0"
    await register(url, prefix, MODEL, engine.url, "r0", concurrency=4)
    statuses: Counter[int] = Counter()
    sent = 0
    stop = asyncio.Event()

    async def client(gw: str) -> None:
        nonlocal sent
        while not stop.is_set():
            sent += 1
            r = await http.post(f"{gw}/v1/chat/completions", json=BODY, timeout=15)
            statuses[r.status_code] += 1

    async def ready(gw: str, degraded: bool) -> bool:
        return bool((await http.get(f"{gw}/ready")).json()["degraded"] is degraded)

    try:
        async with serve_gateway(
            tmp_path, fleet(), url, prefix, presence_interval_s=0.1, admission_redis_timeout_s=0.5
        ) as gw:
            load = [asyncio.create_task(client(gw)) for _ in range(8)]
            await until(lambda: _true(statuses[200] > 20))
            redis_proc.stop()
            await until(lambda: ready(gw, True))
            at_outage = sum(statuses.values())
            await until(lambda: _true(sum(statuses.values()) > at_outage + 20))  # still serving
            redis_proc = start_redis(tmp_path / "redis", port=redis_proc.port)
            await register(url, prefix, MODEL, engine.url, "r0", concurrency=4)
            await until(lambda: ready(gw, False))
            back = statuses[200]
            await until(lambda: _true(statuses[200] > back + 20))
            stop.set()
            await asyncio.wait_for(asyncio.gather(*load), 20)
    finally:
        redis_proc.stop()
    assert sum(statuses.values()) == sent  # every request answered, none hung
    assert set(statuses) <= {200, 429, 503}, statuses


async def _true(value: bool) -> bool:
    return value


async def test_a_queued_open_ended_request_is_refunded_from_its_usage_in_fair_share(
    tmp_path: Path, redis_url: str, prefix: str, http: httpx.AsyncClient
) -> None:
    # One slot: a request holds it, an open-ended one (no max_tokens: it may generate the whole
    # context, 8192) queues behind it, its tenant's fair-share tag charged with all of that. When it
    # ends, the tag keeps only what its usage says it used.
    keys, redis = RedisKeys(prefix), aioredis.Redis.from_url(redis_url)
    with running(start_fake_engine(tmp_path, "--latency-ms", "700")) as slow:
        await register(redis_url, prefix, MODEL, slow.url, "r0", concurrency=1)
        async with serve_gateway(tmp_path, fleet(), redis_url, prefix) as gw:
            url = f"{gw}/v1/chat/completions"
            holder = asyncio.create_task(http.post(url, json=BODY))
            await until(lambda: _held(redis, keys, 1))
            open_ended = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
            queued = asyncio.create_task(http.post(url, json=open_ended))
            await until(lambda: _tag_is(redis, keys, lambda t: t is not None and t >= 8192 - 100))
            assert (await holder).status_code == 200
            r = await queued
            assert r.status_code == 200
            used = r.json()["usage"]["total_tokens"]
            await until(lambda: _tag_is(redis, keys, lambda t: t == used))
    await redis.aclose()


async def _held(redis: aioredis.Redis, keys: RedisKeys, n: int) -> bool:
    return bool(await redis.zcard(keys.leases(MODEL)) == n)


async def _tag_is(redis: aioredis.Redis, keys: RedisKeys, ok: Callable[[int | None], bool]) -> bool:
    value = await redis.hget(keys.tenant_usage(MODEL), "t:anonymous")
    return ok(None if value is None else int(value))
