"""Autoscale cycles: a model with ``scaling: {min_replicas: 0, max_replicas: 2}`` under the supervisor as the
scaler, ``--cycles`` times: at zero, one request waits through the cold start and is answered; a burst
of ``--burst`` streams grows the model to 2 replicas; idle, it returns to 0. Real Redis, the real
supervisor (reconciler, activator, scaling loop), two real gateways (in this process); the replicas are
real vLLM on CPU (``--real``: the default fleet's on-demand model) or the FAKE ENGINE (the short form,
tests/bench/test_autoscale_cycles.py).

Per cycle it reports the first answer's time against the cold start the supervisor measured (and the
mean it keeps in Redis for the gateways' ETA), the most replicas READY during the burst and from the
burst until the model is back at zero (a replica that starts slower than the burst lasts is READY only
after it, so on CPU vLLM the second one rarely serves the burst), and the fault
suite's checkers (bench/faults/checks.py) over the cycle's requests: each with its own ``X-Request-Id``,
judged as the client saw it (answered, a clear error, lost: no answer nor error, cut: a stream ended
without its last event or an error event), and its generations counted from the engines' own request
logs (``Received request <id>``, vLLM's ``--enable-log-requests``, which the FAKE ENGINE logs too): a
request that ran twice, or was answered with no generation at an engine, breaks the rule. The ETA error
is the ETA the gateways told the held request (the cold-start estimate in Redis as the cycle began, which
the held stream's first comment says in whole seconds) against the cold start measured in that cycle;
the first cycle has none (nothing was measured yet). Target: within 20 %.

With ``--real`` the supervisor's page-cache warm-up (workers/autoscale/warmup.py) runs as under
``llmgw-workers``, and the first cycle begins once it has read the model's start ahead, as on a host whose
supervisor loaded the fleet before the first request (``--no-warmup``: without it). ``--cold`` first drops
the engine's libraries and the model's files from the page cache (bench/page_cache.py), as after a boot.
Each cycle's cold start is broken into the phases of vLLM's own log (bench/vllm_start_log.py).

    flock /tmp/llmgw-heavy.lock .venv/bin/python -m bench.autoscale_cycles --real --cycles 3 --cold
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
import yaml

from bench.faults.checks import (
    ANSWERED,
    EngineRuns,
    Outcome,
    client_report,
    count_engine_runs,
    judge_stream,
    judge_whole,
)
from bench.faults.workload import Request, send
from bench.on_demand_cycles import fake_launch, real_launch, roomy
from bench.page_cache import drop, engine_paths
from bench.vllm_start_log import starts
from llmgw_contract.cold_starts import read_cold_start
from llmgw_contract.fleet import load_fleet
from llmgw_contract.fleet_file import FleetWatch
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryTiming, RegistryWriter, ReplicaState
from llmgw_contract.replica_metrics import SupervisorMetrics
from testing.gateway import serve_gateway
from testing.poll import until
from testing.procs import free_port, start_redis
from workers.autoscale.loop import Autoscaler
from workers.autoscale.warmup import Warmup
from workers.converge.loop import Reconciler
from workers.life.owner import Supervisor, SupervisorOptions
from workers.ondemand.activator import Activator, ActivatorOptions
from workers.replica.launch import Launch, ReplicaSpec
from workers.replica.weights import weights_for
from workers.wiring import control_loops

REPO = Path(__file__).resolve().parents[1]
POLL_S = 0.25
"""The gateways' registry poll."""
LOG_REQUESTS = "--enable-log-requests"
"""vLLM's flag (and the FAKE ENGINE's): ``Received request <id>`` per generation, what the checkers count."""
ETA_COMMENT = re.compile(r"^: waiting for \S+, eta (\d+) s")


@dataclass
class Cycle:
    first_answer_s: float
    cold_start_s: float
    cold_start_mean_s: float
    most_ready: int
    """The most READY from the first request until the model was back at zero."""
    ready_in_burst: int
    """The most READY while the burst ran."""
    requests: int
    answered: int
    clear: int
    """Requests refused or ended with an error in their API's shape (a failure with a word)."""
    lost: int
    """Requests with neither an answer nor a clear error (the fault suite's no-answer checker)."""
    cut: int
    """Streams ended without their last event or an error event."""
    ran_twice: int
    """Requests whose generation reached an engine twice (the fault suite's generations checker)."""
    unseen: int
    """Answered requests of which no engine logged a generation (the count itself is broken)."""
    eta_s: float | None
    """The cold-start estimate the gateways held as the cycle began (None: nothing measured yet)."""
    eta_told_s: float | None
    """The ETA in the held stream's first comment (whole seconds; None: "unknown")."""
    phases: dict[str, float | None] | None = None
    """The cold start's phases in vLLM's log (bench/vllm_start_log.py; None: the FAKE ENGINE)."""

    @property
    def failed(self) -> int:
        return self.requests - self.answered

    @property
    def eta_error(self) -> float | None:
        """(ETA told - measured cold start) / measured cold start; None without an ETA."""
        if self.eta_s is None or self.cold_start_s <= 0:
            return None
        return (self.eta_s - self.cold_start_s) / self.cold_start_s


@dataclass
class Report:
    mode: str
    cycles: list[Cycle] = field(default_factory=list)
    cold: bool = False
    """The page cache was dropped first (``--cold``)."""
    warmup_s: float | None = None
    """The supervisor's warm-up, awaited before the first cycle (None: not run)."""

    @property
    def ok(self) -> bool:
        """Every request answered once, no stream cut, 2 replicas reached in every cycle."""
        return all(
            c.failed == c.lost == c.cut == c.ran_twice == c.unseen == 0 and c.most_ready == 2
            for c in self.cycles
        )

    def summary(self) -> dict[str, Any]:
        errors = [c.eta_error for c in self.cycles]
        return {
            "mode": self.mode,
            "cycles": len(self.cycles),
            "page_cache_dropped_first": self.cold,
            "warmup_s": None if self.warmup_s is None else round(self.warmup_s, 2),
            "cold_start_s": [round(c.cold_start_s, 2) for c in self.cycles],
            "requests": sum(c.requests for c in self.cycles),
            "failed": sum(c.failed for c in self.cycles),
            "lost": sum(c.lost for c in self.cycles),
            "cut": sum(c.cut for c in self.cycles),
            "ran_twice": sum(c.ran_twice for c in self.cycles),
            "unseen_at_engines": sum(c.unseen for c in self.cycles),
            "most_ready": sorted({c.most_ready for c in self.cycles}),
            "ready_in_burst": [c.ready_in_burst for c in self.cycles],
            "first_answer_minus_cold_start_s": [
                round(c.first_answer_s - c.cold_start_s, 3) for c in self.cycles
            ],
            "mean_vs_measured": [
                round(c.cold_start_mean_s / max(c.cold_start_s, 1e-9), 3) for c in self.cycles
            ],
            "eta_error": [None if e is None else round(e, 3) for e in errors],
            "eta_within_20pct": all(abs(e) <= 0.2 for e in errors if e is not None),
        }


def fleet_for(real: bool, delay_s: float, base_port: int) -> tuple[str, str]:
    """(fleet YAML, model name): the default fleet's on-demand model, or a fake one, at 0..2 replicas."""
    rule = {"min_replicas": 0, "max_replicas": 2, "target_per_replica": 8, "scale_down_delay_s": delay_s}
    if real:
        model = next(m for m in load_fleet(REPO / "fleet.yaml").models if m.on_demand)
        data = model.model_dump(mode="json", exclude_none=True)
        data.update(replicas=0, scaling=rule, idle_timeout_s=3600, placement={"devices": [0]})
        engine = data.setdefault("engine", {})
        engine["extra_args"] = [*engine.get("extra_args", []), LOG_REQUESTS]
    else:
        data = {
            "name": "as",
            "source": {"path": "/as"},
            "activation": "on_demand",
            "replicas": 0,
            "wake_timeout_s": 60,
            "concurrency": 8,
            "scaling": rule,
            "engine": {"extra_args": ["--delay-ms", "150", LOG_REQUESTS]},
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
    warm: bool,
) -> AsyncIterator[tuple[Supervisor, SupervisorMetrics, aioredis.Redis, RedisKeys, Warmup | None]]:
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
        warmup = Warmup(rec, metrics, every_s=1.0) if warm else None
        prepared = warmup.warm if warmup is not None else (lambda model: True)
        auto = Autoscaler(rec, redis, keys, metrics, every_s=0.2, act=act, prepared=prepared)
        try:
            async with control_loops(sup, rec, act, auto, warmup):
                yield sup, metrics, redis, keys, warmup
        finally:
            await redis.aclose()


def ready(sup: Supervisor) -> int:
    return sum(r.state is ReplicaState.READY for r in sup.replicas)


def chat(model: str) -> Request:
    body = {"model": model, "max_tokens": 16, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    return Request("chat-stream", "/v1/chat/completions", body, True)


async def held(c: httpx.AsyncClient, url: str, model: str, rid: str) -> tuple[Outcome, float | None]:
    """The request held through the cold start (a stream), judged; with the ETA its first comment told."""
    told: float | None = None
    events: list[bytes] = []
    req = chat(model)
    async with c.stream("POST", url + req.path, json=req.body, headers={"x-request-id": rid}) as r:
        if r.status_code != 200:
            return Outcome(req.kind, True, *judge_whole(r.status_code, await r.aread())), None
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                events.append(line.removeprefix("data:").strip().encode())
            elif told is None and (m := ETA_COMMENT.match(line)):
                told = float(m.group(1))
    return Outcome(req.kind, True, *judge_stream(events)), told


@dataclass
class Sent:
    """What one cycle sent: the outcomes, the first answer's time, the ETA told, the most READY."""

    outcomes: list[Outcome]
    first_s: float
    told: float | None
    most: int


async def one_cycle(
    c: httpx.AsyncClient, sup: Supervisor, gateways: list[str], model: str, burst: int, ids: str
) -> Sent:
    """One cycle from zero: the held request, then ``burst`` streams over the gateways; ids ``<ids><n>``."""
    started = time.perf_counter()
    first, told = await held(c, gateways[0], model, f"{ids}0")
    first_s = time.perf_counter() - started
    most = ready(sup)
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal most
        while not done.is_set():
            most = max(most, ready(sup))
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    rest = await asyncio.gather(
        *(send(c, gateways[i % len(gateways)], chat(model), f"{ids}{i + 1}", {}) for i in range(burst))
    )
    done.set()
    await watcher
    return Sent([first, *rest], first_s, told, most)


def judged(sent: Sent, runs: EngineRuns, ids: str) -> tuple[int, int, int, int, int, int, int]:
    """(requests, answered, clear, lost, cut, ran twice, unseen) by the fault suite's checkers; unseen:
    answered, yet no engine logged its generation."""
    report = client_report(sent.outcomes, gateway_killed=False)
    unseen = sum(o.outcome == ANSWERED and f"{ids}{n}" not in runs.ids for n, o in enumerate(sent.outcomes))
    lost, cut = len(report.no_answer), len(report.cut_streams)
    return report.sent, report.answered, report.clear, lost, cut, len(runs.ran_twice), unseen


async def at_zero(c: httpx.AsyncClient, gateways: list[str], model: str) -> bool:
    """Every gateway lists no replica of ``model`` (its /ready detail, seen from this host): a request
    sent now is held at zero, with an ETA."""
    for url in gateways:
        r = await c.get(url + "/ready")
        if r.json().get("models", {}).get(model, {}).get("replicas", 0):
            return False
    return True


async def back_at_zero(sup: Supervisor, most: int) -> int:
    """Wait until the model is back at zero; the most READY meanwhile (or ``most``, if more)."""
    seen = [most]

    def zero() -> bool:
        seen.append(ready(sup))
        return not sup.replicas

    await until(zero, 600, "the model back at zero", interval_s=0.05)
    return max(seen)


def logs(tmp: Path) -> list[Path]:
    """The replicas' logs (``<replica id>.log``; the checkers read only the engines' lines)."""
    return sorted(tmp.glob("*.log"))


def phases_since(tmp: Path, since: datetime) -> dict[str, float | None] | None:
    """The phases of the first vLLM start logged since ``since`` (None: none, e.g. the FAKE ENGINE)."""
    found = [s for f in logs(tmp) for s in starts(f.read_text(errors="replace"), since.year)]
    later = sorted((s for s in found if s.first["APIServer"] >= since.replace(microsecond=0)),
                   key=lambda s: s.first["APIServer"])  # fmt: skip
    return later[0].phases() if later else None


async def run(
    tmp: Path,
    real: bool,
    cycles: int,
    burst: int,
    delay_s: float,
    redis_url: str,
    warmup: bool = True,
    report: Report | None = None,
) -> Report:
    """The cycles; with ``real`` and ``warmup``, after the supervisor's warm-up of the model's start."""
    report = report or Report("vllm" if real else "fake-engine")
    prefix = f"asc{uuid.uuid4().hex[:6]}"
    fleet_text, model = fleet_for(real, delay_s, free_port())
    warm = real and warmup
    async with (
        workers(
            tmp, redis_url, prefix, fleet_text, real_launch if real else fake_launch, not real, warm
        ) as w,
        serve_gateway(tmp, fleet_text, redis_url, prefix, gateway_id="gw-a", registry_poll_s=POLL_S) as a,
        serve_gateway(tmp, fleet_text, redis_url, prefix, gateway_id="gw-b", registry_poll_s=POLL_S) as b,
        httpx.AsyncClient(timeout=900) as c,
    ):
        sup, metrics, redis, keys, warming = w
        if warming is not None:
            t0 = time.perf_counter()
            await until(lambda: warming.warm(model), 600, "the supervisor's warm-up of the model's start")
            report.warmup_s = time.perf_counter() - t0
            print(f"warm-up: {report.warmup_s:.1f} s", flush=True)
        for i in range(1, cycles + 1):
            await until(lambda: not sup.replicas, 600, "the model at zero")
            await until(lambda: at_zero(c, [a, b], model), 30, "the gateways see the model at zero")
            cold0 = metrics.cold_starts.labels(model)._sum.get()
            eta = await read_cold_start(redis, keys, model)
            ids, began = f"asc.{i}.", datetime.now()
            sent = await one_cycle(c, sup, [a, b], model, burst, ids)
            cold = metrics.cold_starts.labels(model)._sum.get() - cold0
            mean = await read_cold_start(redis, keys, model) or 0.0
            most = await back_at_zero(sup, sent.most)  # its logs complete then
            runs = count_engine_runs(logs(tmp), ids, {})
            n, answered, clear, lost, cut, twice, unseen = judged(sent, runs, ids)
            cycle = Cycle(sent.first_s, cold, mean, most, sent.most, n, answered, clear, lost, cut, twice,
                          unseen, eta, sent.told, phases_since(tmp, began))  # fmt: skip
            report.cycles.append(cycle)
            err = "none" if cycle.eta_error is None else f"{cycle.eta_error:+.0%}"
            print(f"cycle {i}: first answer {sent.first_s:.2f} s, cold start {cold:.2f} s "
                  f"(mean {mean:.2f} s), ETA {eta} s (told {sent.told}, error {err}), "
                  f"{most} READY at most ({sent.most} in the burst), {n} requests, {answered} answered, "
                  f"{clear} clear errors, {lost} lost, {cut} cut, {twice} ran twice, {unseen} unseen; "
                  f"phases {cycle.phases}", flush=True)  # fmt: skip
    return report


async def main_async(args: argparse.Namespace) -> Report:
    with tempfile.TemporaryDirectory(prefix="asc-") as d:
        tmp = Path(d)
        report = Report("vllm" if args.real else "fake-engine", cold=args.cold)
        if args.cold:
            _, model = fleet_for(args.real, 1, 0)
            files = [*engine_paths()]
            if args.real:
                files.append(Path(weights_for(next(m for m in load_fleet(REPO / "fleet.yaml").models
                                                   if m.name == model))))  # fmt: skip
            count, size = drop(files)
            print(f"page cache: dropped {count} files ({size >> 20} MiB)", flush=True)
        redis = start_redis(tmp)
        try:
            url = f"redis://127.0.0.1:{redis.port}/0"
            return await run(tmp, args.real, args.cycles, args.burst, args.delay_s, url, args.warmup, report)
        finally:
            redis.stop()


def loadavg() -> str:
    """The host's load averages (1, 5, 15 minutes) as /proc/loadavg gives them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--real", action="store_true", help="real vLLM on CPU (the default fleet's on-demand model)"
    )
    p.add_argument("--cycles", type=int, default=3)
    p.add_argument("--burst", type=int, default=32, help="concurrent streams that grow the model to 2")
    p.add_argument("--delay-s", type=float, default=None, help="scale_down_delay_s (default 10 real, 1 fake)")
    p.add_argument("--out", type=Path, default=None, help="write the report as JSON here")
    p.add_argument("--cold", action="store_true", help="drop the engine's and the model's files from the "
                   "page cache first (as after a boot)")  # fmt: skip
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="--real: without the supervisor's page-cache warm-up")  # fmt: skip
    args = p.parse_args(argv)
    if args.delay_s is None:
        args.delay_s = 10.0 if args.real else 1.0
    before = loadavg()
    report = asyncio.run(main_async(args))
    summary = report.summary()
    print(json.dumps(summary, indent=2))
    if args.out is not None:
        args.out.write_text(
            json.dumps(
                {
                    "summary": summary,
                    "cycles": [asdict(c) for c in report.cycles],
                    "load_average": {"before": before, "after": loadavg()},
                },
                indent=2,
            )
        )
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
