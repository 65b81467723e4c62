"""A non-streamed request that cannot move token-exact runs again whole only once its first replica is
known not to be running it: the registry says its process is gone. A replica that only broke the
connection, or is frozen (its probes fail), may still run it: no second generation; a clear error (504,
``x-should-retry: false``) at the request's deadline. Real gateway, FAKE ENGINE replicas."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from contract.redis_keys import RedisKeys
from contract.registry import ReplicaRecord, remove
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import Proc, start_fake_engine

N = 12
NOT_MOVABLE: dict[str, Any] = {
    "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": N, "logprobs": True,
}  # fmt: skip
UNDISTURBED = "".join(f"tok{i} " for i in range(N))
PROBES = {"health_interval_s": 0.1, "health_timeout_s": 0.3, "eject_base_s": 0.1}


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Proc]]:
    tmp = tmp_path_factory.mktemp("engines")
    procs = {
        "die": start_fake_engine(tmp, "--fault", "die-after-4", "--delay-ms", "50"),
        "die2": start_fake_engine(tmp, "--fault", "die-after-4", "--delay-ms", "50"),
        "hang": start_fake_engine(tmp, "--fault", "hang"),
        "good": start_fake_engine(tmp),
    }
    yield procs
    for p in procs.values():
        p.stop()


@contextlib.asynccontextmanager
async def gateway(
    tmp: Path, redis_url: str, urls: list[str], model: dict[str, Any] | None = None, **settings: Any
) -> AsyncIterator[tuple[str, str]]:
    prefix = f"rr{uuid.uuid4().hex[:8]}"
    for i, url in enumerate(urls):
        await register(redis_url, prefix, "m", url, f"m-{i}")
    fleet = fleet_yaml([{"name": "m", "source": {"path": "/x"}, "policy": "round_robin", **(model or {})}])
    async with serve_gateway(tmp, fleet, redis_url, prefix, **{**PROBES, **settings}) as gw:
        yield gw, prefix


async def stats(c: httpx.AsyncClient, engine: Proc) -> dict[str, Any]:
    return dict((await c.get(f"{engine.url}/stats")).json())


async def reset(c: httpx.AsyncClient, *engines: Proc) -> None:
    for e in engines:
        await c.get(f"{e.url}/stats/reset")


async def test_a_broken_connection_alone_is_no_licence_to_run_again(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    """The replica closed the connection after it took the request but stays registered (its process
    may still run it): nothing is sent elsewhere; at the deadline a clear 504 that says not to retry."""
    urls = [engines["die"].url, engines["good"].url]
    async with gateway(tmp_path, redis_url, urls, request_timeout_s=1.5) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            await reset(c, engines["die"], engines["good"])
            r = await c.post(f"{gw}/v1/chat/completions", json=NOT_MOVABLE)
            elsewhere = (await stats(c, engines["good"]))["started"]
    assert r.status_code == 504, r.text
    assert r.json()["error"]["code"] == "upstream_timeout" and r.headers["x-should-retry"] == "false"
    assert "not run again" in r.json()["error"]["message"]
    assert elsewhere == 0


async def test_a_frozen_replica_failing_its_probes_keeps_the_request_until_its_deadline(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc], caplog: pytest.LogCaptureFixture
) -> None:
    """Its /health fails again and again (it is taken for lost): a frozen replica may wake and finish
    the generation, so it is not run again elsewhere; a clear 504 at the deadline."""
    caplog.set_level(logging.WARNING, "llmgw.monitor")
    urls = [engines["hang"].url, engines["good"].url]
    async with gateway(tmp_path, redis_url, urls, request_timeout_s=3) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            await reset(c, engines["hang"], engines["good"])
            await c.get(f"{engines['hang'].url}/fault/health-delay?ms=1000")
            try:
                r = await c.post(f"{gw}/v1/chat/completions", json=NOT_MOVABLE)
            finally:
                await c.get(f"{engines['hang'].url}/fault/health-delay?ms=0")
            elsewhere = (await stats(c, engines["good"]))["started"]
    assert any("replica=m-0 model=m lost" in m.getMessage() for m in caplog.records)
    assert r.status_code == 504, r.text
    assert r.headers["x-should-retry"] == "false" and elsewhere == 0


async def test_it_runs_again_once_the_registry_says_the_process_is_gone(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    """The connection broke and then the replica's record left the registry (the supervisor withdraws
    a dead process): known not to run it, the request runs again whole on the other replica (vLLM id
    ``<id>-rerun1``) and is answered."""
    urls = [engines["die"].url, engines["good"].url]
    async with gateway(tmp_path, redis_url, urls, request_timeout_s=20) as (gw, prefix):
        async with httpx.AsyncClient(timeout=30) as c:
            await reset(c, engines["die"], engines["good"])
            task = asyncio.create_task(c.post(f"{gw}/v1/chat/completions", json=NOT_MOVABLE))
            await until(lambda: _served(c, engines["die"]), 10, "the broken request at the first replica")
            assert not task.done()  # it waits for evidence, not re-run at once
            await leave(redis_url, prefix, "m-0", urls[0])
            r = await task
            again = await stats(c, engines["good"])
    assert r.status_code == 200, r.text
    assert again["started"] == 1 and again["last_headers"]["x-request-id"].endswith("-rerun1")
    assert json.loads(again["last_body"]) == NOT_MOVABLE
    assert r.json()["choices"][0]["message"]["content"] == UNDISTURBED


async def test_with_no_run_left_a_broken_request_fails_at_once(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    """Its one run again (``migration_attempts: 1``) broke too: nothing is left to wait for, so the
    client gets the 502 at once, not a 504 at the (20 s) deadline."""
    urls = [engines["die"].url, engines["die2"].url]
    model = {"migration_attempts": 1}
    async with gateway(tmp_path, redis_url, urls, model, request_timeout_s=20) as (gw, prefix):
        async with httpx.AsyncClient(timeout=30) as c:
            await reset(c, engines["die"], engines["die2"])
            task = asyncio.create_task(c.post(f"{gw}/v1/chat/completions", json=NOT_MOVABLE))
            await until(lambda: _served(c, engines["die"]), 10, "the broken request at the first replica")
            began = time.monotonic()
            await leave(redis_url, prefix, "m-0", urls[0])
            r = await task
            took = time.monotonic() - began
            runs = (await stats(c, engines["die2"]))["started"]
    assert r.status_code == 502, r.text
    assert r.headers["x-should-retry"] == "false" and runs == 1 and took < 10


async def leave(redis_url: str, prefix: str, rid: str, url: str) -> None:
    redis = aioredis.Redis.from_url(redis_url)
    await remove(redis, RedisKeys(prefix), ReplicaRecord(id=rid, model="m", url=url))
    await redis.aclose()


async def _served(c: httpx.AsyncClient, engine: Proc) -> bool:
    return bool((await stats(c, engine))["served"])
