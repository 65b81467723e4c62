"""A fresh FAKE ENGINE fleet behind real gateways, for the routing benchmarks that run without a model
(:mod:`bench.agentic`, :mod:`bench.routing_pressure`): ``replicas`` engines in one process, each with a
model of vLLM's prefix cache (testing/fake_prefix_cache.py), registered in a real Redis under a key
prefix of their own (so a fresh prefix index too), and ``gateways`` gateway processes with one policy."""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import redis.asyncio as aioredis
import yaml

from bench.routing import Counters
from bench.routing_sim import ready
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord, publish
from llmgw_tools.stack.stack import script
from testing.poll import wait_until
from testing.procs import Proc, free_port, free_port_run, http_ok, spawn


@dataclass(frozen=True, slots=True)
class FakeFleet:
    """What to start: engines with a prefix cache of ``cache_blocks`` 64-character blocks each (and a
    reported KV cache of ``kv_blocks`` 16-token blocks, 0: none), gateways with ``policy`` and ``env``."""

    model: str
    policy: str
    replicas: int
    gateways: int
    max_tokens: int
    cache_blocks: int
    prefill_ms_per_block: float
    kv_blocks: int = 0
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Running:
    gateway_urls: list[str]
    engine_urls: list[str]


async def counters(urls: list[str]) -> list[Counters]:
    """Each engine's vLLM counters (prefix-cache hits and queries, requests)."""
    async with httpx.AsyncClient(timeout=10) as http:
        return [Counters.from_metrics((await http.get(f"{u}/metrics")).text) for u in urls]


@contextlib.asynccontextmanager
async def fake_fleet(f: FakeFleet, redis_url: str, tmp: Path) -> AsyncIterator[Running]:
    """Start the engines and gateways, wait until every gateway sees every replica; stop them after."""
    base, prefix = free_port_run(f.replicas), f"ff{uuid.uuid4().hex[:8]}"
    kv = ["--kv-blocks", str(f.kv_blocks)] if f.kv_blocks else []
    engine = spawn(
        [sys.executable, "-m", "testing.fake_engine", "--port", str(base), "--ports", str(f.replicas),
         "--model", f.model, "--tokens", str(f.max_tokens), "--delay-ms", "2",
         "--prefix-cache-blocks", str(f.cache_blocks),
         "--prefill-ms-per-block", str(f.prefill_ms_per_block), *kv],
        base, tmp / f"engine-{prefix}.log",
    )  # fmt: skip
    urls = [f"http://127.0.0.1:{base + i}" for i in range(f.replicas)]
    procs: list[Proc] = []
    r = aioredis.Redis.from_url(redis_url)
    try:
        wait_until(lambda: all(http_ok(f"{u}/health") for u in urls), 60, "fake engines")
        for i, u in enumerate(urls):
            rec = ReplicaRecord(id=f"{f.model}-{i}", model=f.model, url=u, concurrency=16, instance="i0")
            await publish(r, RedisKeys(prefix), rec, ttl_s=3600)
        fleet = tmp / f"fleet-{prefix}.yaml"
        model = {"name": f.model, "source": {"path": "/nonexistent"}, "policy": f.policy, "concurrency": 16,
                 "max_queue": 4096, "max_queue_wait_s": 120}  # fmt: skip
        fleet.write_text(yaml.safe_dump({"models": [model]}))
        for g in range(f.gateways):
            port = free_port()
            env = {"LLMGW_FLEET_FILE": str(fleet), "LLMGW_REDIS_URL": redis_url, "LLMGW_REDIS_PREFIX": prefix,
                   "LLMGW_GATEWAY_ID": f"{prefix}-gw{g}", "LLMGW_LOG_LEVEL": "WARNING"}  # fmt: skip
            env.update(f.env)
            procs.append(
                spawn([script("llmgw-gateway"), "--port", str(port)], port, tmp / f"gw-{prefix}-{g}.log", env)
            )
        for gw in procs:
            wait_until(lambda gw=gw: ready(gw.url, f.replicas, f.model), 60, f"gateway {gw.url}")  # type: ignore[misc]
        yield Running([gw.url for gw in procs], urls)
    finally:
        await r.aclose()
        for p in procs:
            p.stop()
        engine.stop()
