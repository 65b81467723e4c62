"""A non-streamed request that cannot move token-exact runs again whole only once its first replica is
known not to be running it: the registry says its process is gone. A replica that only broke the
connection may have begun it: a 502 at once; one that is frozen (its probes fail) may wake and finish it:
a 504 at the request's deadline; never a second generation (``x-should-retry: false`` both). Real
gateway, FAKE ENGINE replicas."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord, remove
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
        "hang": start_fake_engine(tmp, "--fault", "hang"),
        "good": start_fake_engine(tmp),
    }
    yield procs
    for p in procs.values():
        p.stop()


@contextlib.asynccontextmanager
async def gateway(
    tmp: Path, redis_url: str, urls: list[str], **settings: Any
) -> AsyncIterator[tuple[str, str]]:
    prefix = f"rr{uuid.uuid4().hex[:8]}"
    for i, url in enumerate(urls):
        await register(redis_url, prefix, "m", url, f"m-{i}")
    fleet = fleet_yaml([{"name": "m", "source": {"path": "/x"}, "policy": "round_robin"}])
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
    may still run it): nothing is sent elsewhere; a clear 502 that says not to retry."""
    urls = [engines["die"].url, engines["good"].url]
    async with gateway(tmp_path, redis_url, urls, request_timeout_s=20) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            await reset(c, engines["die"], engines["good"])
            r = await c.post(f"{gw}/v1/chat/completions", json=NOT_MOVABLE)
            elsewhere = (await stats(c, engines["good"]))["started"]
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "upstream_error" and r.headers["x-should-retry"] == "false"
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
    assert _lost(caplog)
    assert r.status_code == 504, r.text
    assert r.headers["x-should-retry"] == "false" and elsewhere == 0


async def test_it_runs_again_once_the_registry_says_the_process_is_gone(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc], caplog: pytest.LogCaptureFixture
) -> None:
    """The replica took the request and answers nothing, its probes failing (frozen: not run again
    while so); then its record leaves the registry (the supervisor withdraws a dead process): known not
    to run it, the request runs again whole on the other replica (vLLM id ``<id>-rerun1``) and is
    answered."""
    caplog.set_level(logging.WARNING, "llmgw.monitor")
    urls = [engines["hang"].url, engines["good"].url]
    async with gateway(tmp_path, redis_url, urls, request_timeout_s=20) as (gw, prefix):
        async with httpx.AsyncClient(timeout=30) as c:
            await reset(c, engines["hang"], engines["good"])
            await c.get(f"{engines['hang'].url}/fault/health-delay?ms=1000")
            try:
                task = asyncio.create_task(c.post(f"{gw}/v1/chat/completions", json=NOT_MOVABLE))
                await until(lambda: _started(c, engines["hang"]), 10, "the request at the silent replica")
                await until(lambda: _lost(caplog), 10, "the silent replica taken for lost by its probes")
                assert not task.done() and (await stats(c, engines["good"]))["started"] == 0
            finally:
                await c.get(f"{engines['hang'].url}/fault/health-delay?ms=0")
            await leave(redis_url, prefix, "m-0", urls[0])
            r = await task
            again = await stats(c, engines["good"])
    assert r.status_code == 200, r.text
    assert again["started"] == 1 and again["last_headers"]["x-request-id"].endswith("-rerun1")
    assert json.loads(again["last_body"]) == NOT_MOVABLE
    assert r.json()["choices"][0]["message"]["content"] == UNDISTURBED


async def leave(redis_url: str, prefix: str, rid: str, url: str) -> None:
    redis = aioredis.Redis.from_url(redis_url)
    await remove(redis, RedisKeys(prefix), ReplicaRecord(id=rid, model="m", url=url))
    await redis.aclose()


async def _started(c: httpx.AsyncClient, engine: Proc) -> bool:
    return bool((await stats(c, engine))["started"])


def _lost(caplog: pytest.LogCaptureFixture) -> bool:
    return any("replica=m-0 model=m lost" in m.getMessage() for m in caplog.records)
