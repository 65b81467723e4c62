"""The residency benchmark's run: one trace (:mod:`.trace`), three policies (:mod:`.policies`) on the same
simulated H200 (:mod:`.device`), one row each: the fraction of first tokens within 1 s, TTFT p50/p99/max,
wakes and the wakes that waited for a sleep first, moves by kind, refused or over-budget moves.

    .venv/bin/python -m bench.residency.run --out bench/results/residency.json

Device parameters (not measured, named): ``host_gib``, the host RAM level-1 sleepers may take (of the
H200 host's 128 GiB); ``request_tokens``, the tokens one request holds in the KV cache; ``tick_s``."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from bench.residency.device import Device, replay
from bench.residency.h200 import CARD_BYTES, GIB, H200_7B
from bench.residency.policies import AutopilotPolicy, Moves, TodayPolicy, all_awake, capacity
from bench.residency.trace import TraceParams, generate, names
from workers.ondemand.autopilot.costs import H200_SECONDS
from workers.ondemand.autopilot.snapshot import State

FIRST_TOKEN_TARGET_S = 1.0


@dataclass
class Row:
    policy: str
    requests: int = 0
    ttft_le_1s: float = 0.0
    p50_s: float = 0.0
    p99_s: float = 0.0
    max_s: float = 0.0
    wakes: int = 0
    wakes_after_sleep: int = 0
    moves: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    over_budget: int = 0
    decisions: int = 0
    note: str = ""


@dataclass(frozen=True, slots=True)
class Setup:
    trace: TraceParams = field(default_factory=TraceParams)
    host_gib: float = 64.0
    request_tokens: int = 1024
    tick_s: float = 0.5


def percentile(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def row_of(name: str, dev: Device, decisions: int = 0) -> Row:
    ttfts = [s.ttft_s for s in dev.served]
    within = sum(1 for t in ttfts if t <= FIRST_TOKEN_TARGET_S)
    return Row(
        name, len(ttfts), round(within / max(1, len(ttfts)), 4), round(percentile(ttfts, 0.5), 3),
        round(percentile(ttfts, 0.99), 3), round(max(ttfts, default=0.0), 3), dev.wakes,
        dev.wakes_after_sleep, dict(sorted(dev.moves.items())), dev.refused, dev.over_budget, decisions,
    )  # fmt: skip


def device(setup: Setup, states: dict[str, State], gpu_each: int) -> Device:
    footprint = replace(H200_7B, awake=gpu_each)
    return Device.build(states, capacity(gpu_each, setup.request_tokens), footprint, CARD_BYTES,
                        int(setup.host_gib * GIB), H200_SECONDS)  # fmt: skip


def asleep_at_start(setup: Setup) -> dict[str, State]:
    """Every model asleep after a warm-up: level 1 in order while the host RAM takes it, level 2 after."""
    per = int(setup.host_gib * GIB) // H200_7B.host1
    return {n: "asleep1" if i < per else "asleep2" for i, n in enumerate(names(setup.trace.models))}


def simulate(setup: Setup) -> tuple[list[Row], dict[str, Device]]:
    """The three policies on the same trace; the devices kept for the plot."""
    trace, p = generate(setup.trace), setup.trace
    idle_timeout_s = 300.0 / p.compression  # the fleet's default, compressed as the returner's hour is
    end = p.duration_s
    rows, devs = [], {}
    runs: list[tuple[str, Callable[[Device], Moves], Callable[[], int]]] = []
    auto, today = AutopilotPolicy(idle_timeout_s), TodayPolicy(idle_timeout_s)
    runs = [("autopilot", auto, lambda: auto.decisions), ("today", today, lambda: 0)]
    for name, policy, decisions in runs:
        dev = replay(device(setup, asleep_at_start(setup), H200_7B.awake), trace, policy, setup.tick_s, end)
        rows.append(row_of(name, dev, decisions()))
        devs[name] = dev
    each = CARD_BYTES // p.models
    if capacity(each, setup.request_tokens) == 0:
        rows.append(Row("all awake at 1/N", note=f"does not fit: {each >> 20} MiB per model"))
    else:
        states: dict[str, State] = dict.fromkeys(names(p.models), "awake")
        dev = replay(device(setup, states, each), trace, all_awake, setup.tick_s, end)
        row = row_of("all awake at 1/N", dev)
        row.note = f"{each >> 20} MiB each: {capacity(each, setup.request_tokens)} requests at once per model"
        rows.append(row)
        devs["all awake"] = dev
    return rows, devs


def table(rows: list[Row]) -> str:
    lines = [f"{'policy':<18} {'requests':>8} {'<=1s':>7} {'p50 s':>7} {'p99 s':>7} {'max s':>7} "
             f"{'wakes':>5} {'after sleep':>11}"]  # fmt: skip
    for r in rows:
        lines.append(f"{r.policy:<18} {r.requests:>8} {r.ttft_le_1s:>7.2%} {r.p50_s:>7.3f} {r.p99_s:>7.3f} "
                     f"{r.max_s:>7.3f} {r.wakes:>5} {r.wakes_after_sleep:>11}  {r.note}")  # fmt: skip
    return "\n".join(lines)


def report(runs: dict[str, tuple[Setup, list[Row]]], took_s: float) -> dict[str, object]:
    def setup_of(setup: Setup) -> dict[str, object]:
        out: dict[str, object] = dict(asdict(setup))
        out["trace"] = setup.trace.as_dict()
        return out

    return {
        "source": "simulated device, timings and memory of /work/shared/gpu/sleep-mode.md (H200, 2026-12-03)",
        "seconds": dict(H200_SECONDS),
        "replay_cpu_s": round(took_s, 2),
        "traces": {
            name: {
                "setup": setup_of(setup),
                "rows": [asdict(r) for r in rows],
            }
            for name, (setup, rows) in runs.items()
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--plot", type=Path, help="a PNG of the models' states over time (matplotlib)")
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=44)
    args = ap.parse_args()
    base = TraceParams(duration_s=args.duration, seed=args.seed)
    traces = {"default": base, "light": replace(base, rate=0.3, bursts=4)}
    runs: dict[str, tuple[Setup, list[Row]]] = {}
    devs: dict[str, Device] = {}
    started = time.perf_counter()
    for name, params in traces.items():
        setup = Setup(params)
        rows, found = simulate(setup)
        runs[name] = (setup, rows)
        devs = devs or found
        print(f"trace {name}: {params}\n{table(rows)}\n")
    took = time.perf_counter() - started
    print(f"replayed in {took:.2f} s of CPU")
    if args.out:
        args.out.write_text(json.dumps(report(runs, took), indent=2) + "\n")
    if args.plot:
        from bench.residency.plot import plot

        plot(devs, base.duration_s, args.plot)


if __name__ == "__main__":
    main()
