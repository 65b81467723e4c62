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
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from bench.residency.h200 import CARD_BYTES, MIB
from bench.residency.policies import capacity
from bench.residency.results import ArmResult, Record, dump, report_of, result, table
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


@dataclass(frozen=True, slots=True)
class Ask:
    """What each request asks: ``tokens`` streamed, all of them with ``ignore_eos`` (vLLM's extension: a
    model with random weights would otherwise stop at any token)."""

    tokens: int = TOKENS
    ignore_eos: bool = False

    def body(self, model: str) -> dict[str, object]:
        body: dict[str, object] = {"model": model, "max_tokens": self.tokens, "stream": True,
                                   "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
        if self.ignore_eos:
            body["ignore_eos"] = True
        return body


Say = Callable[[str], None]
"""Where the replay's progress lines go (one per event; :func:`quiet` drops them)."""


def quiet(line: str) -> None:
    """Drop a progress line (the CPU replay prints only its table)."""


async def one_request(c: httpx.AsyncClient, url: str, rec: Record, scale: float, ask: Ask = Ask()) -> None:
    """Stream one chat completion; fill ``rec``'s TTFT (first data event) or error."""
    body = ask.body(rec.model)
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


async def warm_up(
    c: httpx.AsyncClient, run: Running, models: list[str], scale: float, ask: Ask = Ask(), say: Say = quiet
) -> None:
    """Ask every model once (not counted) until it answers: an always-on model's 503 while it starts is
    asked again; raise if one still fails after the deadline (every model started one after the other,
    twice over)."""
    began = time.perf_counter()

    async def until_served(model: str) -> str:
        deadline = time.monotonic() + 30 + 2 * len(models) * h200_7b().start_s * scale
        while True:
            rec = Record(model, 0.0, "")
            await one_request(c, run.url, rec, scale, ask)
            if not rec.error or not rec.error.startswith("503") or time.monotonic() > deadline:
                took = time.perf_counter() - began
                say(f"warm-up {model}: {rec.error or 'answered'} after {took:.1f} s")
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


async def replay(
    run: Running,
    trace: list[Request],
    scale: float,
    ask: Ask = Ask(),
    settle_s: float | None = None,
    say: Say = quiet,
    answered: Callable[[Record], None] | None = None,
    drain_s: float | None = None,
) -> list[Record]:
    """Each request sent at its trace time times ``scale``, all streamed at once as they come, after the
    warm-up and up to ``settle_s`` (default 60 + 300 x ``scale``) for the models to stop moving;
    ``answered`` is called with each record as its request ends. With ``drain_s``, the requests still
    unanswered that long after the last one was sent are cancelled, each an error (a bound on the run)."""

    async def one(c: httpx.AsyncClient, rec: Record) -> None:
        await one_request(c, run.url, rec, scale, ask)
        if answered is not None:
            answered(rec)

    async with httpx.AsyncClient(timeout=httpx.Timeout(900, connect=30), limits=httpx.Limits()) as c:
        await warm_up(c, run, sorted({r.model for r in trace} | set(run.obs.slots)), scale, ask, say)
        began = time.perf_counter()
        await settled(run, 60 + 300 * scale if settle_s is None else settle_s)
        say(f"settled in {time.perf_counter() - began:.1f} s: {dict(sorted(run.obs.slots.items()))}")
        run.t0[0] = t0 = time.perf_counter()
        run.obs.timeline[:] = [(0.0, m, label) for m, label in run.obs.slots.items()]
        say(f"trace started: {len(trace)} requests over {trace[-1].t if trace else 0:.0f} trace s")
        tasks, recs = [], []
        for req in trace:
            await asyncio.sleep(max(0.0, t0 + req.t * scale - time.perf_counter()))
            rec = Record(req.model, round(req.t, 3), run.obs.slots.get(req.model, "unseen"))
            recs.append(rec)
            tasks.append(asyncio.create_task(one(c, rec)))
        if tasks and drain_s is not None:
            _, late = await asyncio.wait(tasks, timeout=drain_s)
            for task, rec in zip(tasks, recs, strict=True):
                if task in late:
                    task.cancel()
                    rec.error = f"cancelled: no answer {drain_s:g} s after the trace's last request"
            if late:
                await asyncio.wait(late)
            tasks = [t for t in tasks if t not in late]
        await asyncio.gather(*tasks)
    run.obs.served = [Seen(r.model, r.t) for r in recs]
    return recs


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


def trace_args(ap: argparse.ArgumentParser) -> None:
    """The trace's command-line options (this replay's and the GPU one's, :mod:`bench.residency.gpu`)."""
    ap.add_argument("--models", type=int, default=8)
    ap.add_argument("--duration", type=float, default=600.0, help="trace seconds")
    ap.add_argument("--seed", type=int, default=44)
    ap.add_argument("--short", action="store_true", help="a light trace for a few seconds' run")


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


def report(args: argparse.Namespace, rows: list[ArmResult], took_s: float) -> dict[str, object]:
    head: dict[str, object] = {
        "source": "live replay on CPU: real gateway and supervisor, FAKE GPU ENGINEs --profile h200 "
        "(workers/ondemand/autopilot/h200.py, costs.H200_SECONDS: /work/shared/gpu/sleep-mode.md)",
        "command": args.command,
        "time_scale": args.time_scale,
        "parallel_arms": args.parallel,
        "host_ram_gib": HOST_RAM_GIB,
        "tokens_per_request": TOKENS,
    }
    return report_of(head, trace_params(args), rows, took_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--plot", type=Path, help="a PNG of the models' states over the trace")
    trace_args(ap)
    ap.add_argument("--time-scale", type=float, default=0.2, help="real seconds per trace second")
    ap.add_argument("--arms", nargs="+", default=["autopilot", "today", "all awake"])
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
