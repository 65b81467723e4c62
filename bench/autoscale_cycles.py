"""Autoscale cycles: a model with ``scaling: {min_replicas: 0, max_replicas: 2}`` under the supervisor as the
scaler, ``--cycles`` times: at zero, one request waits through the cold start and is answered; a burst
of ``--burst`` streams grows the model to 2 replicas; idle, it returns to 0. Real Redis, the real
supervisor (reconciler, activator, scaling loop), two real gateways (in this process); the replicas are
real vLLM on CPU (``--real``: the default fleet's on-demand model) or the FAKE ENGINE (the short form,
tests/bench/test_autoscale_cycles.py).

Per cycle it reports the first answer's time against the cold start the supervisor measured (and the
mean it keeps in Redis for the gateways' ETA), the most replicas READY during the burst, failed
requests and streams cut (no ``[DONE]``). Requests run twice are not checked here (the fault suite's
checkers are not wired in).

    flock /tmp/llmgw-heavy.lock .venv/bin/python -m bench.autoscale_cycles --real --cycles 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
import yaml

from bench.on_demand_cycles import fake_launch, real_launch, roomy
from contract.cold_starts import read_cold_start
from contract.fleet import load_fleet
from contract.fleet_file import FleetWatch
from contract.redis_keys import RedisKeys
from contract.registry import RegistryTiming, RegistryWriter, ReplicaState
from contract.replica_metrics import SupervisorMetrics
from testing.gateway import serve_gateway
from testing.poll import until
from testing.procs import free_port, start_redis
from workers.autoscale.loop import Autoscaler
from workers.converge.loop import Reconciler
from workers.life.owner import Supervisor, SupervisorOptions
from workers.ondemand.activator import Activator, ActivatorOptions
from workers.replica.launch import Launch, ReplicaSpec
from workers.wiring import control_loops

REPO = Path(__file__).resolve().parents[1]
POLL_S = 0.25
"""The gateways' registry poll."""


@dataclass
class Cycle:
    first_answer_s: float
    cold_start_s: float
    cold_start_mean_s: float
    most_ready: int
    requests: int
    failed: int
    cut: int


@dataclass
class Report:
    mode: str
    cycles: list[Cycle] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every request answered, no stream cut, 2 replicas reached in every cycle."""
        return all(c.failed == 0 and c.cut == 0 and c.most_ready == 2 for c in self.cycles)

    def summary(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "cycles": len(self.cycles),
            "requests": sum(c.requests for c in self.cycles),
            "failed": sum(c.failed for c in self.cycles),
            "cut": sum(c.cut for c in self.cycles),
            "most_ready": sorted({c.most_ready for c in self.cycles}),
            "first_answer_minus_cold_start_s": [
                round(c.first_answer_s - c.cold_start_s, 3) for c in self.cycles
            ],
            "mean_vs_measured": [
                round(c.cold_start_mean_s / max(c.cold_start_s, 1e-9), 3) for c in self.cycles
            ],
        }


def fleet_for(real: bool, delay_s: float, base_port: int) -> tuple[str, str]:
    """(fleet YAML, model name): the default fleet's on-demand model, or a fake one, at 0..2 replicas."""
    rule = {"min_replicas": 0, "max_replicas": 2, "target_per_replica": 8, "scale_down_delay_s": delay_s}
    if real:
        model = next(m for m in load_fleet(REPO / "fleet.yaml").models if m.on_demand)
        data = model.model_dump(mode="json", exclude_none=True)
        data.update(replicas=0, scaling=rule, idle_timeout_s=3600, placement={"devices": [0]})
    else:
        data = {
            "name": "as",
            "source": {"path": "/as"},
            "activation": "on_demand",
            "replicas": 0,
            "wake_timeout_s": 60,
            "concurrency": 8,
            "scaling": rule,
            "engine": {"extra_args": ["--delay-ms", "150"]},
        }  # fmt: skip  streams outlast a start
    return yaml.safe_dump({"defaults": {"base_port": base_port}, "models": [data]}), data["name"]


@contextlib.asynccontextmanager
async def workers(
    tmp: Path,
    redis_url: str,
    prefix: str,
    fleet_text: str,
    launch: Callable[[ReplicaSpec], Launch],
    fast: bool,
) -> AsyncIterator[tuple[Supervisor, SupervisorMetrics, aioredis.Redis, RedisKeys]]:
    redis = aioredis.Redis.from_url(redis_url)
    keys = RedisKeys(prefix)
    # the drain's settle outlasts the gateways' registry poll (POLL_S): they see DRAINING before the stop
    timing = RegistryTiming(drain_settle_s=2 * POLL_S, drain_grace_s=10) if fast else RegistryTiming()
    options = SupervisorOptions(ready_deadline_s=600, timing=timing)
    metrics = SupervisorMetrics()
    path = tmp / "fleet.yaml"
    path.write_text(fleet_text)
    async with httpx.AsyncClient(timeout=30) as client:
        sup = Supervisor([], RegistryWriter(redis, keys, timing), client, options, metrics=metrics)
        rec = Reconciler(sup, FleetWatch(path), launch, roomy, tmp, 2, metrics)
        act = Activator(
            sup, keys, lambda: rec.fleet, lambda r: 0, lambda: 1 << 40, metrics, ActivatorOptions()
        )
        auto = Autoscaler(rec, redis, keys, metrics, every_s=0.2)
        try:
            async with control_loops(sup, rec, act, auto):
                yield sup, metrics, redis, keys
        finally:
            await redis.aclose()


def ready(sup: Supervisor) -> int:
    return sum(r.state is ReplicaState.READY for r in sup.replicas)


async def stream(c: httpx.AsyncClient, url: str, model: str) -> tuple[int, bool]:
    """One chat stream: (status, ended with [DONE])."""
    body = {"model": model, "max_tokens": 16, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    async with c.stream("POST", url + "/v1/chat/completions", json=body) as r:
        lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
        return r.status_code, bool(lines) and lines[-1] == "data: [DONE]"


async def one_cycle(
    c: httpx.AsyncClient, sup: Supervisor, gateways: list[str], model: str, burst: int
) -> tuple[float, int, int, int, int]:
    """(first answer s, most READY, requests, failed, cut) of one cycle from zero."""
    started = time.perf_counter()
    results = [await stream(c, gateways[0], model)]
    first = time.perf_counter() - started
    most = ready(sup)
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal most
        while not done.is_set():
            most = max(most, ready(sup))
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    results += await asyncio.gather(*(stream(c, gateways[i % len(gateways)], model) for i in range(burst)))
    done.set()
    await watcher
    failed = sum(status != 200 for status, _ in results)
    cut = sum(status == 200 and not finished for status, finished in results)
    return first, most, len(results), failed, cut


async def run(tmp: Path, real: bool, cycles: int, burst: int, delay_s: float, redis_url: str) -> Report:
    prefix = f"asc{uuid.uuid4().hex[:6]}"
    fleet_text, model = fleet_for(real, delay_s, free_port())
    report = Report("vllm" if real else "fake-engine")
    async with (
        workers(tmp, redis_url, prefix, fleet_text, real_launch if real else fake_launch, not real) as w,
        serve_gateway(tmp, fleet_text, redis_url, prefix, gateway_id="gw-a", registry_poll_s=POLL_S) as a,
        serve_gateway(tmp, fleet_text, redis_url, prefix, gateway_id="gw-b", registry_poll_s=POLL_S) as b,
        httpx.AsyncClient(timeout=900) as c,
    ):
        sup, metrics, redis, keys = w
        for i in range(1, cycles + 1):
            await until(lambda: not sup.replicas, 600, "the model at zero")
            cold0 = metrics.cold_starts.labels(model)._sum.get()
            first, most, n, failed, cut = await one_cycle(c, sup, [a, b], model, burst)
            cold = metrics.cold_starts.labels(model)._sum.get() - cold0
            mean = await read_cold_start(redis, keys, model, sup.replicas[0].spec.device_kind) or 0.0
            report.cycles.append(Cycle(first, cold, mean, most, n, failed, cut))
            print(f"cycle {i}: first answer {first:.2f} s, cold start {cold:.2f} s (mean {mean:.2f} s), "
                  f"{most} READY at most, {n} requests, {failed} failed, {cut} cut", flush=True)  # fmt: skip
    return report


async def main_async(args: argparse.Namespace) -> Report:
    with tempfile.TemporaryDirectory(prefix="asc-") as d:
        tmp = Path(d)
        redis = start_redis(tmp)
        try:
            url = f"redis://127.0.0.1:{redis.port}/0"
            return await run(tmp, args.real, args.cycles, args.burst, args.delay_s, url)
        finally:
            redis.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--real", action="store_true", help="real vLLM on CPU (the default fleet's on-demand model)"
    )
    p.add_argument("--cycles", type=int, default=3)
    p.add_argument("--burst", type=int, default=32, help="concurrent streams that grow the model to 2")
    p.add_argument("--delay-s", type=float, default=None, help="scale_down_delay_s (default 10 real, 1 fake)")
    p.add_argument("--out", type=Path, default=None, help="write the report as JSON here")
    args = p.parse_args(argv)
    if args.delay_s is None:
        args.delay_s = 10.0 if args.real else 1.0
    report = asyncio.run(main_async(args))
    summary = report.summary()
    print(json.dumps(summary, indent=2))
    if args.out is not None:
        args.out.write_text(
            json.dumps({"summary": summary, "cycles": [asdict(c) for c in report.cycles]}, indent=2)
        )
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
