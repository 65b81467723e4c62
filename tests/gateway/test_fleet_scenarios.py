"""Fleet changes under a steady load, end to end in one process: the supervisor and its reconcile loop
(replicas are the FAKE ENGINE, testing/fake_engine.py), a real gateway (uvicorn) reading the same fleet
file, a real Redis that is killed and replaced by an empty one. Every request of the steady model is
checked; the test prints the time each change took to converge and the request counts."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import redis.asyncio as aioredis

from llmgw_contract.fleet_file import FleetWatch
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryTiming, RegistryWriter, ReplicaState
from llmgw_contract.replica_metrics import SupervisorMetrics
from testing.fake_workers import fake_launch
from testing.gateway import serve_gateway
from testing.poll import until
from testing.procs import free_port, start_redis
from tests.workers.test_reconciler import fits, fleet_yaml
from workers.converge.loop import Reconciler
from workers.life.owner import RestartBackoff, Supervisor, SupervisorOptions

OPTIONS = SupervisorOptions(
    ready_deadline_s=20,
    timing=RegistryTiming(ttl_s=3, drain_settle_s=1.0, drain_grace_s=5),  # settle > the gateway's poll
    backoff=RestartBackoff(base_s=0.05, max_s=0.2, give_up_after=3),
    max_start_attempts=1,
    redis_check_s=0.1,
)
STEADY = ["--latency-ms", "30"]


async def steady(url: str, model: str, stop: asyncio.Event, seen: Counter[str]) -> None:
    """One client in a loop: each answer counted by status (and error code when not 200)."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with httpx.AsyncClient(timeout=30) as c:
        while not stop.is_set():
            r = await c.post(f"{url}/v1/chat/completions", json=body)
            seen["200" if r.status_code == 200 else f"{r.status_code} {r.json()['error']['code']}"] += 1


async def test_fleet_changes_under_load_fail_no_request(tmp_path: Path) -> None:
    port = free_port()
    server = start_redis(tmp_path / "r1", port)
    redis_url = f"redis://127.0.0.1:{port}/0"
    prefix, base = f"sc{uuid.uuid4().hex[:6]}", free_port()
    first = fleet_yaml(base, {"a": (2, STEADY)})
    path = tmp_path / f"fleet-{prefix}.yaml"  # the gateway's own file: supervisor and gateway follow it
    path.write_text(first)
    redis = aioredis.Redis.from_url(redis_url)
    took: dict[str, float] = {}
    seen: Counter[str] = Counter()
    stop = asyncio.Event()
    try:
        async with httpx.AsyncClient() as c:
            metrics = SupervisorMetrics()
            registry = RegistryWriter(redis, RedisKeys(prefix), OPTIONS.timing)
            sup = Supervisor([], registry, c, OPTIONS, metrics=metrics)
            rec = Reconciler(sup, FleetWatch(path, 0.05), fake_launch, fits, tmp_path, 1, metrics)
            tasks = [asyncio.create_task(sup.run()), asyncio.create_task(rec.run())]

            def ready() -> set[str]:
                return {r.spec.id for r in sup.replicas if r.state is ReplicaState.READY}

            async def change(name: str, text: str, done: Callable[[], object]) -> None:
                started = time.monotonic()
                path.write_text(text)
                await until(done)
                took[name] = time.monotonic() - started

            await until(lambda: ready() == {"a-0", "a-1"})
            async with serve_gateway(tmp_path, first, redis_url, prefix) as gw:

                async def status(model: str) -> int:
                    body = {"model": model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
                    return (await c.post(f"{gw}/v1/chat/completions", json=body, timeout=10)).status_code

                load = [asyncio.create_task(steady(gw, "a", stop, seen)) for _ in range(4)]
                replaced = fleet_yaml(base, {"a": (2, [*STEADY, "--tokens", "8"])})
                await change("replace a (2 replicas)", replaced,
                             lambda: ready() == {"a-2", "a-3"} and len(sup.replicas) == 2)  # fmt: skip
                one = fleet_yaml(base, {"a": (1, [*STEADY, "--tokens", "8"])})
                await change("scale a 2 -> 1", one, lambda: len(sup.replicas) == 1)
                added = fleet_yaml(base, {"a": (1, [*STEADY, "--tokens", "8"]), "b": (1, [])})
                await change("add b", added, lambda: _eq(status("b"), 200))

                async def b_removed() -> bool:
                    return len(sup.replicas) == 1 and await status("b") == 404

                await change("remove b", one, b_removed)
                started = time.monotonic()
                server.kill()
                server = start_redis(tmp_path / "r2", port)  # a new, empty Redis
                await until(lambda: sup.republished == 1)
                took["redis replaced: republished"] = time.monotonic() - started
                before = seen["200"]
                await until(lambda: seen["200"] > before + 20)
                stop.set()
                await asyncio.gather(*load)
            tasks[1].cancel()
            await asyncio.gather(tasks[1], return_exceptions=True)
            await sup.drain()
            await tasks[0]
    finally:
        stop.set()
        await redis.aclose()
        server.stop()
    print("converged in: " + ", ".join(f"{k} {v:.1f} s" for k, v in took.items()))
    print(f"steady model a: {dict(seen)}")
    assert set(seen) == {"200"}, dict(seen)


async def _eq(pending: Awaitable[int], value: int) -> bool:
    return await pending == value
