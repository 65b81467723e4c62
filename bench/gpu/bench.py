"""The H200 benchmark of the running stack (supervisor + vLLM replicas + gateway), run ON THE DEVICE by
bench/gpu/device.sh once every replica is ready.

    python -m bench.gpu.bench --fleet bench/gpu/fleet-h200.yaml --gateway http://127.0.0.1:9000 \
        --plan bench/gpu/results/plan.json --baseline /tmp/run-device/baseline.csv \
        --supervisor-log /tmp/run/supervisor.log --log-dir /tmp/run/logs --out /tmp/run/results

(a) memory: nvidia-smi per process and in total against the planner's prediction -> memory.json;
(b) throughput through the gateway against direct to the same vLLM processes;
(c) all models at once against one after another, at each --levels requests in flight per model.
Every run is a row of throughput.csv; results.json and summary.md hold the ratios.

"One after another" is the aggregate rate of serving equal work per model in turn: the harmonic mean of
the models' solo rates.  "All at once" is the sum of their rates while all three run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.gpu import memory
from bench.gpu.loadgen import Load, RunResult, client_for, closed_loop
from llmgw_contract.fleet import load_fleet
from workers.host.gpu import ProbeError, parse_gpu_memory
from workers.replica.launch import plan_replicas

FIELDS = ["level", "path", "mode", "model", "output_tok_s", "req_s", "completed", "errors", "p50_s", "p99_s"]


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


async def wait_ready(gateway: str, models: list[str], deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    async with httpx.AsyncClient(timeout=5) as c:
        while time.monotonic() < end:
            try:
                detail = (await c.get(f"{gateway}/ready")).json()
                ready = detail.get("models", {})
                if all(ready.get(m, {}).get("ready_replicas", 0) >= 1 for m in models):
                    return
            except (httpx.HTTPError, ValueError):
                pass
            await asyncio.sleep(1)
    raise TimeoutError(f"gateway {gateway} did not list {models} as ready in {deadline_s:.0f} s")


async def run_set(urls: dict[str, str], models: list[str], load: Load, seed: int) -> list[RunResult]:
    """All ``models`` at once (one model: alone), each at ``load.inflight`` in flight."""
    async with client_for(load.inflight * len(models)) as client:
        start = time.monotonic()
        return list(
            await asyncio.gather(
                *(closed_loop(client, urls[m], m, load, seed + i, start) for i, m in enumerate(models))
            )
        )


def harmonic(rates: list[float]) -> float:
    return len(rates) / sum(1 / r for r in rates) if all(r > 0 for r in rates) else 0.0


class Matrix:
    def __init__(self, out: Path, models: list[str], direct: dict[str, str], gateway: str) -> None:
        self.out, self.models = out, models
        self.paths = {"direct": direct, "gateway": dict.fromkeys(models, gateway)}
        self.rows: list[dict[str, Any]] = []
        self.csv = out / "throughput.csv"
        with self.csv.open("w", newline="") as f:
            csv.DictWriter(f, FIELDS).writeheader()

    def record(self, level: int, path: str, mode: str, results: list[RunResult]) -> None:
        for r in results:
            s = r.summary()
            row = {
                "level": level, "path": path, "mode": mode, "model": r.model,
                "output_tok_s": s["output_tok_s"], "req_s": s["req_s"], "completed": s["completed"],
                "errors": sum(r.errors.values()), "p50_s": s["latency_p50_s"], "p99_s": s["latency_p99_s"],
            }  # fmt: skip
            self.rows.append(row)
            with self.csv.open("a", newline="") as f:
                csv.DictWriter(f, FIELDS).writerow(row)
            say(
                f"  {path:7s} {mode:10s} {r.model:11s} {s['output_tok_s']:8.1f} tok/s errors {dict(r.errors)}"
            )

    async def level(self, level: int, path: str, warmup_s: float, window_s: float) -> None:
        load = Load(level, warmup_s=warmup_s, window_s=window_s)
        urls = self.paths[path]
        # Distinct prompts for every run: a path that reran the other's prompts would hit the prefix cache
        # (the first H200 pass did: 40 % hits at 4 in flight for the path that ran second).
        base = 100_000 * level + (0 if path == "direct" else 50_000)
        say(f"{level} in flight per model, {path}: one after another")
        for i, m in enumerate(self.models):
            self.record(level, path, "serial", await run_set(urls, [m], load, seed=base + 1000 * i))
        say(f"{level} in flight per model, {path}: all at once")
        self.record(level, path, "concurrent", await run_set(urls, self.models, load, seed=base + 10_000))

    def rate(self, level: int, path: str, mode: str) -> dict[str, float]:
        return {
            r["model"]: r["output_tok_s"]
            for r in self.rows
            if (r["level"], r["path"], r["mode"]) == (level, path, mode)
        }

    def summary(self, levels: list[int]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for level in levels:
            entry: dict[str, Any] = {}
            for path in ("direct", "gateway"):
                solo, conc = self.rate(level, path, "serial"), self.rate(level, path, "concurrent")
                if len(solo) < len(self.models) or len(conc) < len(self.models):
                    continue
                serial = harmonic(list(solo.values()))
                together = sum(conc.values())
                entry[path] = {
                    "solo_tok_s": solo,
                    "concurrent_tok_s": conc,
                    "one_after_another_tok_s": round(serial, 1),
                    "all_at_once_tok_s": round(together, 1),
                    "all_at_once_over_one_after_another": round(together / serial, 3) if serial else None,
                }
            if "direct" in entry and "gateway" in entry:
                d, g = entry["direct"], entry["gateway"]
                entry["gateway_over_direct"] = {
                    "all_at_once": round(g["all_at_once_tok_s"] / d["all_at_once_tok_s"], 3),
                    "one_after_another": round(
                        g["one_after_another_tok_s"] / d["one_after_another_tok_s"], 3
                    ),
                }
            out[str(level)] = entry
        return out


def markdown(summary: dict[str, Any], mem: dict[str, Any]) -> str:
    lines = ["| in flight / model | path | one after another tok/s | all at once tok/s | at once ÷ serial |"]
    lines.append("|---|---|---|---|---|")
    for level, e in summary.items():
        for path in ("direct", "gateway"):
            if path in e:
                p = e[path]
                lines.append(
                    f"| {level} | {path} | {p['one_after_another_tok_s']:,.0f} | "
                    f"{p['all_at_once_tok_s']:,.0f} | {p['all_at_once_over_one_after_another']} |"
                )
        if "gateway_over_direct" in e:
            g = e["gateway_over_direct"]
            lines.append(f"| {level} | gateway ÷ direct | {g['one_after_another']} | {g['all_at_once']} | |")
    lines += [
        "",
        "| model | budget | predicted MiB | measured MiB | error % | start Δ MiB |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in mem.get("models", {}).items():
        lines.append(
            f"| {name} | {m['budget']} | {m['predicted_mib']:,} | {m['measured_mib']:,} | {m['error_pct']} | "
            f"{m['start_delta_mib']} |"
        )
    if "device" in mem:
        d = mem["device"]
        lines.append(
            f"| device total | | {d['predicted_used_mib']:,} | {d['used_mib']:,} | {d['error_pct']} | |"
        )
    return "\n".join(lines) + "\n"


def logs_by_model(log_dir: Path, models: list[str]) -> dict[str, str]:
    out = {}
    for m in models:
        path = log_dir / f"{m}-0.log"
        out[m] = path.read_text(errors="replace") if path.exists() else ""
    return out


def measure_memory(args: argparse.Namespace, models: list[str]) -> dict[str, Any]:
    plan = json.loads(args.plan.read_text())
    baseline = parse_gpu_memory(args.baseline.read_text())[0].used_bytes >> 20
    sup_log = args.supervisor_log.read_text(errors="replace") if args.supervisor_log.exists() else ""
    snap = memory.snapshot()
    result = memory.compare(
        snap, plan, baseline, memory.supervisor_deltas(sup_log, baseline), logs_by_model(args.log_dir, models)
    )
    result["snapshot"] = snap
    return result


async def main_async(args: argparse.Namespace) -> int:
    fleet = load_fleet(args.fleet)
    models = [m.name for m in fleet.models]
    direct = {s.model.name: s.url for s in plan_replicas(fleet.models, fleet.defaults, 1)}
    direct.update(dict(kv.split("=", 1) for kv in args.direct.split(",") if kv))
    args.out.mkdir(parents=True, exist_ok=True)
    await wait_ready(args.gateway, models, args.ready_deadline)
    say(f"all ready: {direct}")
    try:
        mem = measure_memory(args, models)
    except ProbeError as exc:  # no GPU (a dry run with fake engines)
        mem = {"error": str(exc)}
    (args.out / "memory.json").write_text(json.dumps(mem, indent=2) + "\n")
    say(f"memory: {json.dumps(mem.get('device', mem))}")
    say("warm-up: every model at 8 in flight, through the gateway and direct")
    warm = Load(8, warmup_s=0, window_s=args.warmup)
    for seed, urls in enumerate((direct, dict.fromkeys(models, args.gateway)), start=7):
        for r in await run_set(urls, models, warm, seed=seed):
            if r.errors or not r.completed:
                say(f"warm-up failed for {r.model} at {r.url}: {dict(r.errors)}")
                return 1
    matrix = Matrix(args.out, models, direct, args.gateway)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    for i, level in enumerate(args.levels):
        order = ("direct", "gateway") if i % 2 == 0 else ("gateway", "direct")
        for path in order:
            await matrix.level(level, path, args.warmup, args.window)
        summary = matrix.summary(args.levels)
        (args.out / "results.json").write_text(
            json.dumps({"summary": summary, "rows": matrix.rows}, indent=2)
        )
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    loadgen_cpu = (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) / (time.monotonic() - t0)
    with contextlib.suppress(ProbeError):
        mem["after_benchmark"] = memory.snapshot()
    (args.out / "memory.json").write_text(json.dumps(mem, indent=2) + "\n")
    summary = matrix.summary(args.levels)
    doc = {
        "summary": summary,
        "rows": matrix.rows,
        "load": {"prompt_tokens": 256, "max_tokens": 128, "ignore_eos": True, "warmup_s": args.warmup,
                 "window_s": args.window, "levels": args.levels},
        "loadgen_cpu_cores": round(loadgen_cpu, 3),
    }  # fmt: skip
    (args.out / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = markdown(summary, mem)
    (args.out / "summary.md").write_text(md)
    print(md, flush=True)
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fleet", type=Path, default=Path("bench/gpu/fleet-h200.yaml"))
    p.add_argument("--gateway", default="http://127.0.0.1:9000")
    p.add_argument("--plan", type=Path, default=Path("bench/gpu/results/plan.json"))
    p.add_argument("--baseline", type=Path, required=True, help="nvidia-smi --query-gpu before any start")
    p.add_argument("--supervisor-log", type=Path, required=True)
    p.add_argument("--log-dir", type=Path, required=True, help="the replicas' logs")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=[4, 16, 128])
    p.add_argument("--warmup", type=float, default=8.0, help="seconds before the window (first H200 pass: 4)")
    p.add_argument("--window", type=float, default=30.0, help="seconds measured (first H200 pass: 10)")
    p.add_argument("--ready-deadline", type=float, default=120.0)
    p.add_argument(
        "--direct", default="", help="model=url,... overriding the fleet's replica URLs (dry runs)"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
