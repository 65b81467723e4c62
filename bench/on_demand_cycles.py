"""On-demand cycles: an on-demand model is stopped, woken by load through two gateways, put back to sleep
when idle, ``--cycles`` times. Real Redis, the real supervisor, reconciler and activator, two real
gateways (in this process); the replica is real vLLM (``--real``: the default fleet's Gemma) or the
FAKE ENGINE (the short form ``make test`` runs through tests/bench/test_on_demand_cycles.py).

Per cycle it reports the time from the first request to the stopped model to its answer against the
replica's own start-up time (target: start-up + 2 s), failed requests, and the wakes the supervisor
made and the gateways asked for (target: exactly one each per cycle).

    flock /tmp/llmgw-heavy.lock .venv/bin/python -m bench.on_demand_cycles --real --cycles 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
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

from llmgw_contract.fleet import load_fleet
from llmgw_contract.fleet_file import FleetWatch
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryTiming, RegistryWriter, ReplicaState
from llmgw_contract.replica_metrics import SupervisorMetrics
from testing.gateway import serve_gateway
from testing.poll import until
from testing.procs import free_port, start_redis
from workers.converge.headroom import Headroom, host_available_bytes
from workers.converge.loop import Reconciler
from workers.life.owner import Supervisor, SupervisorOptions
from workers.ondemand.activator import Activator, ActivatorOptions
from workers.replica.launch import Launch, ReplicaSpec, build_launch
from workers.replica.weights import weights_for
from workers.wiring import control_loops

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Cycle:
    first_answer_s: float
    startup_s: float
    wake_s: float
    requests: int
    failed: int
    wakes: int
    wake_requests: int

    @property
    def over_startup_s(self) -> float:
        return self.first_answer_s - self.startup_s


@dataclass
class Report:
    mode: str
    cycles: list[Cycle] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Zero failed requests and exactly one wake (made and asked for) in every cycle."""
        return all(c.failed == 0 and c.wakes == 1 and c.wake_requests == 1 for c in self.cycles)

    def summary(self) -> dict[str, Any]:
        over = [c.over_startup_s for c in self.cycles]
        return {
            "mode": self.mode,
            "cycles": len(self.cycles),
            "requests": sum(c.requests for c in self.cycles),
            "failed": sum(c.failed for c in self.cycles),
            "wakes_per_cycle": sorted({c.wakes for c in self.cycles}),
            "wake_requests_per_cycle": sorted({c.wake_requests for c in self.cycles}),
            "startup_s_median": statistics.median(c.startup_s for c in self.cycles),
            "first_answer_s_median": statistics.median(c.first_answer_s for c in self.cycles),
            "first_answer_minus_startup_s_median": statistics.median(over),
            "first_answer_minus_startup_s_max": max(over),
        }


def fake_launch(spec: ReplicaSpec) -> Launch:
    argv = [sys.executable, "-m", "testing.fake_engine", "--port", str(spec.port), "--model", spec.model.name]
    return Launch([*argv, "--delay-ms", "5", *spec.model.engine.extra_args])


def real_launch(spec: ReplicaSpec) -> Launch:
    return build_launch(spec, weights_for(spec.model))


def fleet_for(real: bool, idle_s: float, base_port: int) -> tuple[str, str]:
    """(fleet YAML, model name): the default fleet's on-demand model, or a fake one."""
    if real:
        fleet = load_fleet(REPO / "fleet.yaml")
        model = next(m for m in fleet.models if m.on_demand)
        data = model.model_dump(mode="json", exclude_none=True)
        data.update(idle_timeout_s=idle_s, placement={"devices": [0]})
        return yaml.safe_dump({"defaults": {"base_port": base_port}, "models": [data]}), model.name
    fake = {"name": "od", "source": {"path": "/od"}, "activation": "on_demand", "idle_timeout_s": idle_s,
            "wake_timeout_s": 60, "concurrency": 4}  # fmt: skip
    return yaml.safe_dump({"defaults": {"base_port": base_port}, "models": [fake]}), "od"


async def roomy(_: ReplicaSpec) -> Headroom:
    return Headroom(1 << 40, 1)


@contextlib.asynccontextmanager
async def workers(
    tmp: Path,
    redis_url: str,
    prefix: str,
    fleet_text: str,
    launch: Callable[[ReplicaSpec], Launch],
    fast: bool,
) -> AsyncIterator[tuple[Supervisor, SupervisorMetrics]]:
    redis = aioredis.Redis.from_url(redis_url)
    keys = RedisKeys(prefix)
    timing = RegistryTiming(drain_settle_s=0.3, drain_grace_s=10) if fast else RegistryTiming()
    options = SupervisorOptions(ready_deadline_s=600, timing=timing)
    metrics = SupervisorMetrics()
    path = tmp / "fleet.yaml"
    path.write_text(fleet_text)
    async with httpx.AsyncClient(timeout=30) as client:
        sup = Supervisor([], RegistryWriter(redis, keys, timing), client, options, metrics=metrics)
        rec = Reconciler(sup, FleetWatch(path), launch, roomy, tmp, 2, metrics)
        act = Activator(
            sup,
            keys,
            lambda: rec.fleet,
            lambda r: 0,
            host_available_bytes,
            metrics,
            ActivatorOptions(tick_s=0.1),
        )
        try:
            async with control_loops(sup, rec, act):
                yield sup, metrics
        finally:
            await redis.aclose()


def counter(text: str, name: str) -> float:
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + "{"))


def asleep(sup: Supervisor) -> bool:
    return bool(sup.replicas) and all(
        r.state is ReplicaState.ASLEEP and not r.process.alive for r in sup.replicas
    )


def wakes_made(metrics: SupervisorMetrics) -> float:
    return counter(metrics.render().decode(), "llmgw_supervisor_wakes_total")


async def wakes_asked(c: httpx.AsyncClient, gateways: list[str]) -> float:
    return sum([counter((await c.get(g + "/metrics")).text, "llmgw_wake_requests_total") for g in gateways])


async def one_cycle(
    c: httpx.AsyncClient, gateways: list[str], model: str, clients: int, per_client: int, kind: str
) -> tuple[float, int, int]:
    """Load on the asleep model through both gateways; returns (first answer s, requests, failed)."""
    body: dict[str, Any]
    if kind == "embedding":
        path, body = "/v1/embeddings", {"model": model, "input": "hello"}
    else:
        messages = [{"role": "user", "content": "Say hi"}]
        path, body = "/v1/chat/completions", {"model": model, "max_tokens": 4, "messages": messages}
    started = time.perf_counter()
    first: list[float] = []
    failed = 0

    async def user(i: int) -> None:
        nonlocal failed
        for n in range(per_client):
            r = await c.post(gateways[(i + n) % len(gateways)] + path, json=body)
            if not first and i == 0 and n == 0:
                first.append(time.perf_counter() - started)
            if r.status_code != 200:
                failed += 1
                print(f"  failed: {r.status_code} {r.text[:200]}", flush=True)

    await asyncio.gather(*(user(i) for i in range(clients)))
    return first[0], clients * per_client, failed


async def run(
    tmp: Path,
    real: bool,
    cycles: int,
    clients: int,
    per_client: int,
    idle_s: float,
    redis_url: str,
    stop_at: float = float("inf"),
) -> Report:
    prefix = f"odc{uuid.uuid4().hex[:6]}"
    fleet_text, model = fleet_for(real, idle_s, free_port())
    launch = real_launch if real else fake_launch
    report = Report("vllm" if real else "fake-engine")
    async with (
        workers(tmp, redis_url, prefix, fleet_text, launch, fast=not real) as (sup, metrics),
        serve_gateway(tmp, fleet_text, redis_url, prefix, gateway_id="gw-a", registry_poll_s=1.0) as a,
        serve_gateway(tmp, fleet_text, redis_url, prefix, gateway_id="gw-b", registry_poll_s=1.0) as b,
        httpx.AsyncClient(timeout=900) as c,
    ):
        kind = load_fleet(tmp / "fleet.yaml").models[0].kind
        for i in range(1, cycles + 1):
            if time.monotonic() > stop_at:
                print(f"time budget spent: {i - 1} of {cycles} cycles run", flush=True)
                break
            await until(lambda: asleep(sup), 600, "the model asleep")
            wakes0, wake_sum0 = wakes_made(metrics), metrics.wake_seconds.labels(model)._sum.get()
            asked0 = await wakes_asked(c, [a, b])
            first, n, failed = await one_cycle(c, [a, b], model, clients, per_client, kind)
            r = sup.replicas[0]
            cycle = Cycle(
                first_answer_s=first, startup_s=r.startup_s,
                wake_s=metrics.wake_seconds.labels(model)._sum.get() - wake_sum0, requests=n, failed=failed,
                wakes=int(wakes_made(metrics) - wakes0),
                wake_requests=int(await wakes_asked(c, [a, b]) - asked0),
            )  # fmt: skip
            report.cycles.append(cycle)
            print(
                f"cycle {i}: first answer {first:.2f} s, start-up {r.startup_s:.2f} s "
                f"(+{cycle.over_startup_s:.2f} s), {n} requests, {failed} failed, "
                f"{cycle.wakes} wake(s) in {cycle.wake_s:.2f} s, {cycle.wake_requests} wake request(s)",
                flush=True,
            )
    return report


async def main_async(args: argparse.Namespace) -> Report:
    with tempfile.TemporaryDirectory(prefix="odc-") as d:
        tmp = Path(d)
        redis = start_redis(tmp)
        try:
            return await run(
                tmp, args.real, args.cycles, args.clients, args.per_client, args.idle_s,
                f"redis://127.0.0.1:{redis.port}/0", time.monotonic() + args.budget_s,
            )  # fmt: skip
        finally:
            redis.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--real", action="store_true", help="real vLLM (the default fleet's on-demand model)")
    p.add_argument("--cycles", type=int, default=20)
    p.add_argument("--clients", type=int, default=4, help="concurrent users per cycle")
    p.add_argument("--per-client", type=int, default=3, help="requests each user sends per cycle")
    p.add_argument("--idle-s", type=float, default=None, help="idle_timeout_s (default 5 real, 0.5 fake)")
    p.add_argument("--budget-s", type=float, default=float("inf"), help="start no cycle after this long")
    p.add_argument("--out", type=Path, default=None, help="write the report as JSON here")
    args = p.parse_args(argv)
    if args.idle_s is None:
        args.idle_s = 5.0 if args.real else 0.5
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
