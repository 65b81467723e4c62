"""Evidence before action, through a real gateway in front of two FAKE ENGINE replicas: a failed /health
probe (a slow answer, as a busy CPU host gives) takes the replica out of new picks only. A request in
flight there is neither ended nor run again because of it: it completes on its replica, one generation
in all. A replica that failed a probe and then answers comes back into picks."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import Proc, start_fake_engine

N = 12
CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": N}
UNDISTURBED = "".join(f"tok{i} " for i in range(N))
PROBES = {"health_interval_s": 0.1, "health_timeout_s": 0.3, "eject_base_s": 0.2}
"""Probes every 0.1 s; an answer slower than 0.3 s fails one."""


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Proc]]:
    tmp = tmp_path_factory.mktemp("engines")
    procs = {"slow": start_fake_engine(tmp, "--latency-ms", "2500"), "good": start_fake_engine(tmp)}
    yield procs
    for p in procs.values():
        p.stop()


@contextlib.asynccontextmanager
async def gateway(tmp: Path, redis_url: str, urls: list[str], **settings: Any) -> AsyncIterator[str]:
    """A gateway whose first request goes to ``urls[0]`` (round robin over ids in order)."""
    prefix = f"ev{uuid.uuid4().hex[:8]}"
    for i, url in enumerate(urls):
        await register(redis_url, prefix, "m", url, f"m-{i}")
    fleet = fleet_yaml([{"name": "m", "source": {"path": "/x"}, "policy": "round_robin"}])
    async with serve_gateway(tmp, fleet, redis_url, prefix, **{**PROBES, **settings}) as gw:
        yield gw


async def started(c: httpx.AsyncClient, engine: Proc) -> int:
    return int((await c.get(f"{engine.url}/stats")).json()["started"])


async def metric(c: httpx.AsyncClient, gw: str, line: str) -> bool:
    return line in (await c.get(f"{gw}/metrics")).text


@contextlib.asynccontextmanager
async def slow_health(c: httpx.AsyncClient, engine: Proc, ms: int) -> AsyncIterator[None]:
    await c.get(f"{engine.url}/fault/health-delay?ms={ms}")
    try:
        yield
    finally:
        await c.get(f"{engine.url}/fault/health-delay?ms=0")


async def one_failed_probe_while_in_flight(
    c: httpx.AsyncClient, gw: str, engines: dict[str, Proc], body: dict[str, Any]
) -> httpx.Response:
    """Send ``body``; once the slow replica works on it, its /health answers late once (one failed
    probe: ejected), then on time again; the answer."""
    for e in engines.values():
        await c.get(f"{e.url}/stats/reset")
    task = asyncio.create_task(c.post(f"{gw}/v1/chat/completions", json=body))
    await until(lambda: started(c, engines["slow"]), 10, "the request at the slow replica")
    async with slow_health(c, engines["slow"], 600):
        ejected = 'llmgw_ejections_total{model="m",replica="m-0"} 1.0'
        await until(lambda: metric(c, gw, ejected), 5, "the slow replica ejected by its probe")
    return await task


@pytest.mark.parametrize(
    ("case", "body"),
    [("movable", CHAT), ("not movable", {**CHAT, "logprobs": True})],
)
async def test_one_failed_probe_neither_ends_nor_reruns_the_work_in_flight(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc], case: str, body: dict[str, Any]
) -> None:
    """Movable (sent as a stream, waiting for its first token): it was ended with a 502 on the first
    failed probe. Not movable: it ran again whole on the other replica while the first still ran it. Now
    both complete where they are, one generation each."""
    async with gateway(tmp_path, redis_url, [engines["slow"].url, engines["good"].url]) as gw:
        async with httpx.AsyncClient(timeout=30) as c:
            r = await one_failed_probe_while_in_flight(c, gw, engines, body)
            runs = (await started(c, engines["slow"]), await started(c, engines["good"]))
    assert r.status_code == 200, (case, r.text)
    assert r.json()["choices"][0]["message"]["content"] == UNDISTURBED
    assert runs == (1, 0), case


async def test_a_replica_that_failed_a_probe_and_answers_again_is_back_in_picks(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    async with gateway(tmp_path, redis_url, [engines["good"].url, engines["slow"].url]) as gw:
        async with httpx.AsyncClient(timeout=30) as c:
            ready = 'llmgw_ready_replicas{model="m"} '
            await until(lambda: metric(c, gw, ready + "2.0"), 5, "both replicas ready")
            async with slow_health(c, engines["good"], 600):
                await until(lambda: metric(c, gw, ready + "1.0"), 5, "the slow prober out of picks")
            await until(lambda: metric(c, gw, ready + "2.0"), 5, "back in picks after a good probe")
