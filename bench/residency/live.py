"""The residency benchmark live on CPU: the same seeded trace (:mod:`bench.residency.trace`) replayed through
a real gateway to a real supervisor whose N on-demand models are FAKE GPU ENGINEs taught the lent H200
(``--profile h200``: its measured memory per state and seconds per sleep, wake and start) on one FAKE H200
(the FAKE nvidia-smi). Three arms in the same run, one after the other (``--parallel``: at once, the short
form): ``autopilot`` (the fleet's default), ``today`` (``defaults.autopilot: false``: the idle timeout and
the at-the-moment eviction), and ``all awake`` at 1/N of the card (when the budget leaves the weights and a
KV cache room). Per request: the model, its state when it arrived (read from the fake card), its time to
first token, its error; per arm: the fraction of first tokens within 1 s, p50/p99, errors, throughput.

Timings run compressed by ``--time-scale K``: every engine wait is the H200's times K, the trace's times
are times K, and each measured TTFT is divided by K to give card seconds. The gateway's, the supervisor's
and the sampler's own work is not scaled, so it weighs 1/K times more than on the card (at K = 0.2 a 20 ms
gateway path reads as 100 ms), and the autopilot's fixed windows (10 s of demand history) span 1/K times
more trace. Before the trace each model is asked once (a warm-up, not counted: every model is started).

    .venv/bin/python -m bench.residency.live --out bench/results/residency-live.json \\
        --plot docs/img/residency-live.png
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import httpx

from bench.residency.h200 import CARD_BYTES, MIB
from bench.residency.policies import capacity
from bench.residency.run import FIRST_TOKEN_TARGET_S, percentile
from bench.residency.stack import ArmSpec, Observed, Running, Seen, all_awake_budget, arm_stack
from bench.residency.trace import Request, TraceParams, generate, names
from testing.gpu_profile import h200_7b
from testing.poll import until
from testing.procs import start_redis
from workers.ondemand.autopilot.h200 import BUDGET

TOKENS = 16
"""Tokens each request streams (its decode spread over the trace's ``service_s``)."""
HOST_RAM_GIB = 64.0
"""The host RAM level-1 sleepers may take (the simulation's ``host_gib``; a parameter, not measured)."""


@dataclass(slots=True)
class Record:
    model: str
    t: float
    """Trace seconds of its arrival."""
    state: str
    """The model's state on the fake card when it arrived (``x->``: moving from x)."""
    ttft_s: float | None = None
    """Card seconds: the measured time to first token over the time scale (None: no token)."""
    ttft_real_s: float | None = None
    error: str = ""


@dataclass(slots=True)
class ArmResult:
    arm: str
    requests: int = 0
    errors: int = 0
    ttft_le_1s: float = 0.0
    p50_s: float = 0.0
    p99_s: float = 0.0
    max_s: float = 0.0
    throughput_rps: float = 0.0
    """Requests answered in full per trace second."""
    arrived_asleep: int = 0
    note: str = ""
    records: list[Record] = field(default_factory=list)


async def one_request(c: httpx.AsyncClient, url: str, rec: Record, scale: float) -> None:
    """Stream one chat completion; fill ``rec``'s TTFT (first data event) or error."""
    body = {"model": rec.model, "max_tokens": TOKENS, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    started, done = time.perf_counter(), False
    try:
        async with c.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                rec.error = f"{r.status_code} {(await r.aread())[:200]!r}"
                return
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                if rec.ttft_real_s is None:
                    rec.ttft_real_s = time.perf_counter() - started
                    rec.ttft_s = rec.ttft_real_s / scale
                done = done or line.strip() == "data: [DONE]"
    except httpx.HTTPError as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
        return
    if not done:
        rec.error = "stream ended without [DONE]"


async def warm_up(c: httpx.AsyncClient, run: Running, models: list[str], scale: float) -> None:
    """Ask every model once (not counted) until it answers: an always-on model's 503 while it starts is
    asked again; raise if one still fails after the deadline (every model started one after the other,
    twice over)."""

    async def until_served(model: str) -> str:
        deadline = time.monotonic() + 30 + 2 * len(models) * h200_7b().start_s * scale
        while True:
            rec = Record(model, 0.0, "")
            await one_request(c, run.url, rec, scale)
            if not rec.error or not rec.error.startswith("503") or time.monotonic() > deadline:
                return f"{model}: {rec.error}" if rec.error else ""
            await asyncio.sleep(0.2)

    if bad := [e for e in await asyncio.gather(*(until_served(m) for m in models)) if e]:
        raise RuntimeError(f"warm-up failed ({run.supervisor_log}): {bad}")


async def settled(run: Running, deadline_s: float) -> None:
    """Wait (up to ``deadline_s``) until no model is moving: the warm-up's sleeps over."""

    def still() -> bool:
        return bool(run.obs.slots) and not any("->" in v for v in run.obs.slots.values())

    with contextlib.suppress(AssertionError):
        await until(still, deadline_s, "the warm-up's moves over", interval_s=0.1)


async def replay(run: Running, trace: list[Request], scale: float) -> list[Record]:
    """Each request sent at its trace time times ``scale``, all streamed at once as they come."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(900, connect=30), limits=httpx.Limits()) as c:
        await warm_up(c, run, sorted({r.model for r in trace} | set(run.obs.slots)), scale)
        await settled(run, 60 + 300 * scale)
        run.t0[0] = t0 = time.perf_counter()
        run.obs.timeline[:] = [(0.0, m, label) for m, label in run.obs.slots.items()]
        tasks, recs = [], []
        for req in trace:
            await asyncio.sleep(max(0.0, t0 + req.t * scale - time.perf_counter()))
            rec = Record(req.model, round(req.t, 3), run.obs.slots.get(req.model, "unseen"))
            recs.append(rec)
            tasks.append(asyncio.create_task(one_request(c, run.url, rec, scale)))
        await asyncio.gather(*tasks)
    run.obs.served = [Seen(r.model, r.t) for r in recs]
    return recs


def result(arm: str, recs: list[Record], duration_s: float, note: str = "") -> ArmResult:
    ttfts = [r.ttft_s for r in recs if r.ttft_s is not None and not r.error]
    errors = sum(1 for r in recs if r.error)
    within = sum(1 for t in ttfts if t <= FIRST_TOKEN_TARGET_S)
    asleep = sum(1 for r in recs if r.state != "awake")
    return ArmResult(
        arm, len(recs), errors, round(within / max(1, len(recs)), 4), round(percentile(ttfts, 0.5), 3),
        round(percentile(ttfts, 0.99), 3), round(max(ttfts, default=0.0), 3),
        round((len(recs) - errors) / duration_s, 3), asleep, note, recs,
    )  # fmt: skip


def arms(params: TraceParams, scale: float, which: list[str]) -> list[ArmSpec]:
    """The three arms' specs: the same models, idle timeout (the fleet's 300 s compressed as the returner's
    hour is, then by the time scale) and decode pace."""
    models = names(params.models)
    idle = 300.0 / params.compression * scale
    delay_ms = params.service_s * scale * 1000 / TOKENS
    base = ArmSpec("autopilot", models, True, True, BUDGET, idle, scale, TOKENS, delay_ms, HOST_RAM_GIB)
    each = all_awake_budget(len(models))
    out = {"autopilot": base, "today": replace(base, name="today", autopilot=False),
           "all awake": replace(base, name="all awake", on_demand=False, budget=each)}  # fmt: skip
    return [out[w] for w in which]


def fits_all_awake(spec: ArmSpec) -> str:
    """Why all-awake at 1/N cannot serve ('' when it can): the weights and one request's KV must fit."""
    each = int(spec.budget * CARD_BYTES)
    return "" if capacity(each, 1024) else f"does not fit: {each // MIB} MiB per model"


async def run_arm(
    spec: ArmSpec, trace: list[Request], params: TraceParams, tmp: Path, redis_url: str
) -> tuple[ArmResult, Observed]:
    if not spec.on_demand and (why := fits_all_awake(spec)):
        return ArmResult(spec.name, note=why), Observed()
    (tmp / spec.name.replace(" ", "-")).mkdir()
    try:
        async with arm_stack(spec, tmp / spec.name.replace(" ", "-"), redis_url) as run:
            recs = await replay(run, trace, spec.time_scale)
    except RuntimeError as exc:  # a warm-up that failed: the arm's row says so, the other arms go on
        return ArmResult(spec.name, errors=1, note=f"failed: {exc}"[:400]), Observed()
    note = f"budget {spec.budget} each" if not spec.on_demand else ""
    return result(spec.name, recs, params.duration_s, note), run.obs


def trace_params(args: argparse.Namespace) -> TraceParams:
    """The trace's parameters; ``--short``: one 2-second burst, no idle gap, the returner back halfway
    (the short form ``make test`` runs)."""
    p = TraceParams(models=args.models, duration_s=args.duration, seed=args.seed)
    if args.short:
        d = args.duration
        p = replace(p, bursts=1, burst_s=2.0, gaps=0, return_at_s=d / 10, hour_s=d / 2, return_requests=2)
    return p


async def run_all(args: argparse.Namespace) -> tuple[list[ArmResult], dict[str, Observed]]:
    params = trace_params(args)
    trace = generate(params)
    tmp = Path(tempfile.mkdtemp(prefix="residency-live-"))
    print(f"logs under {tmp}", flush=True)
    try:
        redis = start_redis(tmp / "redis")
        url = f"redis://127.0.0.1:{redis.port}/0"
        try:
            specs = arms(params, args.time_scale, args.arms)
            runs = [run_arm(s, trace, params, tmp, url) for s in specs]
            if args.parallel:
                done = await asyncio.gather(*runs)
            else:
                done = [await r for r in runs]
        finally:
            redis.stop()
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return [r for r, _ in done], {r.arm: o for r, o in done if o.timeline}


def table(rows: list[ArmResult]) -> str:
    lines = [f"{'arm':<10} {'requests':>8} {'errors':>6} {'<=1s':>7} {'p50 s':>7} {'p99 s':>7} {'max s':>7} "
             f"{'req/s':>6} {'not awake':>9}"]  # fmt: skip
    for r in rows:
        lines.append(f"{r.arm:<10} {r.requests:>8} {r.errors:>6} {r.ttft_le_1s:>7.2%} {r.p50_s:>7.3f} "
                     f"{r.p99_s:>7.3f} {r.max_s:>7.3f} {r.throughput_rps:>6.3f} {r.arrived_asleep:>9}  "
                     f"{r.note}")  # fmt: skip
    return "\n".join(lines)


def report(args: argparse.Namespace, rows: list[ArmResult], took_s: float) -> dict[str, object]:
    params = trace_params(args)
    return {
        "source": "live replay on CPU: real gateway and supervisor, FAKE GPU ENGINEs --profile h200 "
        "(workers/ondemand/autopilot/h200.py, costs.H200_SECONDS: /work/shared/gpu/sleep-mode.md)",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": args.command,
        "time_scale": args.time_scale,
        "parallel_arms": args.parallel,
        "wall_s": round(took_s, 1),
        "trace": params.as_dict(),
        "host_ram_gib": HOST_RAM_GIB,
        "tokens_per_request": TOKENS,
        "arms": [{k: v for k, v in asdict(r).items() if k != "records"} for r in rows],
        "record_fields": RECORD_FIELDS,
        "records": {r.arm: [row_of(x) for x in r.records] for r in rows},
    }


RECORD_FIELDS = ["model", "t", "state", "ttft_s", "ttft_real_s", "error"]
"""The columns of each request's row in the JSON (one short list a request keeps the file small)."""


def row_of(rec: Record) -> list[object]:
    """``rec`` as a row of :data:`RECORD_FIELDS`, TTFTs to 0.1 ms of card time and 10 us measured."""
    card = None if rec.ttft_s is None else round(rec.ttft_s, 4)
    real = None if rec.ttft_real_s is None else round(rec.ttft_real_s, 5)
    return [rec.model, rec.t, rec.state, card, real, rec.error]


def dump(out: dict[str, object]) -> str:
    """The report as JSON: indented, each request's row on one line."""
    text = json.dumps({k: v for k, v in out.items() if k != "records"}, indent=1)
    records = out["records"]
    assert isinstance(records, dict)
    arms = ",\n".join(
        f" {json.dumps(arm)}: [\n" + ",\n".join(f"  {json.dumps(row)}" for row in rows) + "\n ]"
        for arm, rows in records.items()
    )
    return text[:-2] + ',\n "records": {\n' + arms + "\n }\n}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--plot", type=Path, help="a PNG of the models' states over the trace")
    ap.add_argument("--models", type=int, default=8)
    ap.add_argument("--duration", type=float, default=600.0, help="trace seconds")
    ap.add_argument("--time-scale", type=float, default=0.2, help="real seconds per trace second")
    ap.add_argument("--seed", type=int, default=44)
    ap.add_argument("--arms", nargs="+", default=["autopilot", "today", "all awake"])
    ap.add_argument("--short", action="store_true", help="a light trace for a few seconds' run")
    ap.add_argument("--keep", action="store_true", help="keep the logs' folder")
    ap.add_argument("--parallel", action="store_true", help="run the arms at once (the short form)")
    args = ap.parse_args(argv)
    args.command = "python -m bench.residency.live " + " ".join(argv if argv is not None else sys.argv[1:])
    started = time.perf_counter()
    rows, observed = asyncio.run(run_all(args))
    took = time.perf_counter() - started
    print(table(rows))
    print(f"wall {took:.1f} s")
    if args.out:
        args.out.write_text(dump(report(args, rows, took)))
    if args.plot and observed:
        from bench.residency.plot import plot

        plot(observed, args.duration, args.plot)
    return 0 if all(r.errors == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
