"""Issue 17 on the H200: three on-demand 7B models on one card (two fit awake), through two gateways.

Phases (each request alternates between the gateways; every request streams, so its first token is timed):
  cold    each model asked once: the first wake starts its vLLM process (cold start).
  asleep  once all three sleep: what each sleeping replica still holds (nvidia-smi, per process).
  wake    ROUNDS rounds over the three models, each found asleep with room for it (at most one other
          awake; idle models sleep ahead of need): burst 1 (--probe-n requests, the first one times the
          wake to its first token), then burst 2 at once (--burst-n, the model awake). With --probe-n
          equal to --burst-n, the throughput ratio burst 1 / burst 2 is the cost of the wake against a
          model that was already awake (all-awake co-location).
  swap    two models awake, the third asked at once, so one must first be put to sleep to make room:
          c, a awake then b asked (c, level 2, makes room), then c asked (a, level 1, makes room).
The supervisor logs the ledger's prediction of the card beside nvidia-smi's reading at every wake and
sleep (``ledger gpu:0 after ...``); they are collected from its log. Writes sleep.json and summary.md.
Run by bench/gpu/sleep.sh (or its ``dry`` phase: FAKE GPU ENGINES, FAKE nvidia-smi, same code).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

MODELS = ("llama-a", "llama-b", "llama-c")
LEVEL = {"llama-a": 1, "llama-b": 1, "llama-c": 2}
WORDS = ["the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at", "from",
         "his", "an", "were", "are", "which", "this", "be"]  # fmt: skip
LEDGER = re.compile(
    r"ledger gpu:\d+ after (?P<step>.+?) of replica=(?P<replica>\S+): it holds (?P<held>\d+) MiB; "
    r"predicted (?P<pred>[-\d]+) MiB, card (?P<card>\d+) MiB \((?P<off>[^)]*) of (?P<total>\d+) MiB\)"
    r"(?:; changing: (?P<changing>[^;\s]+))?"
)


@dataclass
class Reply:
    status: int
    ttft_s: float
    total_s: float
    tokens: int
    error: str = ""


@dataclass
class Burst:
    model: str
    requests: int
    started: float
    wall_s: float
    first_ttft_s: float
    """The first request sent: from the request to its first token."""
    max_ttft_s: float
    tokens: int
    failed: int
    errors: list[str] = field(default_factory=list)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s else 0.0


class Load:
    def __init__(self, client: httpx.AsyncClient, gateways: Sequence[str], seed: int) -> None:
        self.client, self.gateways, self.rng = client, list(gateways), random.Random(seed)
        self.sent = 0

    def prompt(self, words: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(words))

    async def one(self, model: str, max_tokens: int, prompt: str) -> Reply:
        gw = self.gateways[self.sent % len(self.gateways)]
        self.sent += 1
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                "ignore_eos": True, "temperature": 0, "stream_options": {"include_usage": True}}  # fmt: skip
        t0 = time.monotonic()
        ttft, chunks, usage = 0.0, 0, 0
        try:
            async with self.client.stream("POST", f"{gw}/v1/completions", json=body) as resp:
                if resp.status_code != 200:
                    text = (await resp.aread()).decode(errors="replace")[:300]
                    return Reply(resp.status_code, 0.0, time.monotonic() - t0, 0, text)
                async for line in resp.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    event = json.loads(line[6:])
                    if event.get("choices"):
                        ttft = ttft or time.monotonic() - t0
                        chunks += 1
                    if event.get("usage"):
                        usage = int(event["usage"].get("completion_tokens") or 0)
        except httpx.HTTPError as exc:
            return Reply(599, ttft, time.monotonic() - t0, usage or chunks, repr(exc)[:300])
        return Reply(200, ttft, time.monotonic() - t0, usage or chunks)  # usage: vLLM; chunks: the fake

    async def burst(self, model: str, n: int, max_tokens: int, words: int) -> Burst:
        prompts = [self.prompt(words) for _ in range(n)]
        t0 = time.monotonic()
        replies = await asyncio.gather(*(self.one(model, max_tokens, p) for p in prompts))
        wall = time.monotonic() - t0
        bad = [r for r in replies if r.status != 200 or r.tokens < max_tokens]
        return Burst(
            model, n, time.time(), wall, replies[0].ttft_s, max(r.ttft_s for r in replies),
            sum(r.tokens for r in replies), len(bad), [f"{r.status} {r.error}" for r in bad][:5],
        )  # fmt: skip

    async def states(self) -> dict[str, str]:
        resp = await self.client.get(f"{self.gateways[0]}/v1/models", timeout=5)
        return {m["id"]: m.get("state", "?") for m in resp.json()["data"]}

    async def wait(self, ok: Any, what: str, deadline_s: float = 120.0) -> dict[str, str]:
        """Poll the gateway's model states until ``ok(states)``; returns them (raises at the deadline)."""
        end = time.monotonic() + deadline_s
        while True:
            states = await self.states()
            if ok(states):
                return states
            if time.monotonic() > end:
                raise TimeoutError(f"{what}: states {states} after {deadline_s:.0f} s")
            await asyncio.sleep(0.2)


def smi() -> dict[str, Any]:
    """The card's used MiB and each process's MiB, mapped to the model it serves."""
    q = ["nvidia-smi", "--format=csv,noheader,nounits"]
    used = subprocess.run([*q, "--query-gpu=memory.used,memory.total"], capture_output=True, text=True)
    apps = subprocess.run([*q, "--query-compute-apps=pid,used_memory"], capture_output=True, text=True)
    card, total = (int(x) for x in used.stdout.split("\n")[0].split(","))
    per: dict[str, int] = {}
    for line in apps.stdout.strip().splitlines():
        pid, mib = (int(x) for x in line.split(","))
        name = model_of(pid)
        per[name] = per.get(name, 0) + mib
    return {"at": time.time(), "card_mib": card, "total_mib": total, "per_model_mib": per}


def model_of(pid: int) -> str:
    """The served model of a process or of its nearest ancestor that names one (vLLM's engine core is a
    child of its API server)."""
    while pid > 1:
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return f"pid {pid}"
        if b"--served-model-name" in args:
            return args[args.index(b"--served-model-name") + 1].decode()
        if b"--model" in args and b"testing.fake_gpu_engine" in args:
            return args[args.index(b"--model") + 1].decode()
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return "other"


def ledger_lines(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if m := LEDGER.search(line):
            d = m.groupdict()
            row: dict[str, Any] = {"time": line[:23], "step": d["step"], "replica": d["replica"],
                                   "held_mib": int(d["held"]), "card_mib": int(d["card"]),
                                   "changing": d["changing"] or "?"}  # fmt: skip
            if d["pred"] != "-":
                row["predicted_mib"] = int(d["pred"])
                row["off_pct_of_card"] = round((int(d["pred"]) - int(d["card"])) / int(d["total"]) * 100, 3)
                row["off_pct_of_used"] = round(
                    (int(d["pred"]) - int(d["card"])) / max(1, int(d["card"])) * 100, 3
                )
            out.append(row)
    return out


async def run(a: argparse.Namespace) -> dict[str, Any]:
    res: dict[str, Any] = {"cold": [], "wake": [], "swap": [], "memory": [], "errors": []}
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(600, connect=10), limits=httpx.Limits(max_connections=512)
    ) as c:
        load = Load(c, a.gateways.split(","), a.seed)
        await load.wait(lambda s: all(s.get(m) == "asleep" for m in MODELS), "all asleep at start", 60)
        res["memory"].append({"when": "start", **smi()})
        print("phase cold: each model's first wake starts its process", flush=True)
        for m in MODELS:
            b = await load.burst(m, a.cold_n, 16, a.words)
            res["cold"].append(asdict(b) | {"level": LEVEL[m]})
            res["memory"].append({"when": f"{m} awake (cold)", **smi()})
            print(f"  cold {m}: first token {b.first_ttft_s:.2f} s, failed {b.failed}", flush=True)
        await load.wait(
            lambda s: all(s.get(m) == "asleep" for m in MODELS), "all asleep after cold", a.settle_s
        )
        res["memory"].append({"when": "all asleep", **smi()})
        print(
            "phase wake: each model found asleep with room; burst 1 wakes it, burst 2 finds it awake",
            flush=True,
        )
        for rnd in range(a.rounds):
            for m in MODELS:

                def room(s: dict[str, str], m: str = m) -> bool:
                    return s.get(m) == "asleep" and sum(s.get(x) != "asleep" for x in MODELS if x != m) <= 1

                await load.wait(room, f"{m} asleep with room", a.settle_s)
                before = smi()
                b1 = await load.burst(m, a.probe_n, a.tokens, a.words)
                b2 = await load.burst(m, a.burst_n, a.tokens, a.words)
                res["wake"].append({"round": rnd, "model": m, "level": LEVEL[m], "asleep": asdict(b1),
                                    "awake": asdict(b2), "smi_before": before,
                                    "smi_after": smi()})  # fmt: skip
                ratio = b1.tok_s / max(b2.tok_s, 1e-9)
                print(f"  round {rnd} {m} (level {LEVEL[m]}): wake+first token {b1.first_ttft_s:.3f} s; "
                      f"tok/s {b1.tok_s:.0f} vs awake {b2.tok_s:.0f} ({ratio:.3f}); "
                      f"failed {b1.failed + b2.failed}", flush=True)  # fmt: skip
        print("phase swap: two awake, the third asked: one sleeps first to make room", flush=True)
        for rep in range(a.swap_reps):
            await load.wait(lambda s: all(s.get(m) == "asleep" for m in MODELS), "all asleep", a.settle_s)
            steps = []
            for m, what in (("llama-c", "wake c"), ("llama-a", "wake a"),
                            ("llama-b", "swap: c (level 2) sleeps, b (level 1) wakes"),
                            ("llama-c", "swap: a (level 1) sleeps, c (level 2) wakes")):  # fmt: skip
                b = await load.burst(m, a.swap_n, 16, a.words)
                steps.append({"step": what, **asdict(b)})
                print(
                    f"  rep {rep} {what}: first token {b.first_ttft_s:.3f} s, failed {b.failed}", flush=True
                )
            res["swap"].append(steps)
        res["memory"].append({"when": "end", **smi()})
    return res


def stats(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{min(xs):.3f}–{max(xs):.3f} s (median {statistics.median(xs):.3f}, n={len(xs)})"


def rate(bursts: list[dict[str, Any]]) -> float:
    """Tokens per second over a set of bursts."""
    tokens: float = sum(b["tokens"] for b in bursts)
    wall: float = sum(b["wall_s"] for b in bursts)
    return tokens / max(1e-9, wall)


def table(res: dict[str, Any], ledger: list[dict[str, Any]]) -> list[str]:
    rows = ["| measure | result | target |", "|---|---|---|"]
    for lvl, target in ((1, "≤ 0.75 s"), (2, "≤ 3.5 s")):
        xs = [w["asleep"]["first_ttft_s"] for w in res["wake"] if w["level"] == lvl]
        rows.append(f"| request to a level-{lvl} sleeper → first token (gateway) | {stats(xs)} | {target} |")
    sw = [s for rep in res["swap"] for s in rep]
    l2v = [s["first_ttft_s"] for s in sw if s["step"].startswith("swap: c")]
    l1v = [s["first_ttft_s"] for s in sw if s["step"].startswith("swap: a")]
    rows.append(f"| swap: a level-2 model sleeps, then a level-1 wake | {stats(l2v)} | ≤ 4 s |")
    rows.append(f"| swap: a level-1 model sleeps, then a level-2 wake | {stats(l1v)} | - |")
    rows.append(
        f"| first wake = cold start of the process | {stats([c['first_ttft_s'] for c in res['cold']])} | - |"
    )
    mem = next((m for m in res["memory"] if m["when"] == "all asleep"), None)
    if mem:
        held = f"{mem['per_model_mib']} MiB; card {mem['card_mib']} MiB"
        rows.append(f"| GPU memory held asleep (nvidia-smi) | {held} | - |")
    same = [w for w in res["wake"] if w["asleep"]["requests"] == w["awake"]["requests"]]
    woke, awake = [w["asleep"] for w in same], [w["awake"] for w in same]
    if woke:
        ratios = [rate([a]) / max(rate([b]), 1e-9) for a, b in zip(woke, awake, strict=True)]
        total = f"{rate(woke):.0f} ÷ {rate(awake):.0f} tok/s = {rate(woke) / max(rate(awake), 1e-9):.3f}"
        spread = f"{min(ratios):.3f}–{max(ratios):.3f}"
        rows.append(f"| throughput, burst with a wake ÷ same burst awake | {spread}; {total} | - |")
    offs = [abs(r["off_pct_of_card"]) for r in ledger if "off_pct_of_card" in r]
    used = [abs(r["off_pct_of_used"]) for r in ledger if "off_pct_of_used" in r]
    if offs:
        got = f"max {max(offs):.2f} % of the card, {max(used):.2f} % of its used memory (n={len(offs)})"
        rows.append(f"| ledger prediction vs nvidia-smi, every wake and sleep | {got} | within 1 % |")
    settled = [abs(r["off_pct_of_card"]) for r in ledger if r.get("changing") == "none"]
    if settled:
        got = f"max {max(settled):.2f} % of the card (n={len(settled)})"
        rows.append(
            f"| the same, no other model waking or going to sleep at that moment | {got} | within 1 % |"
        )
    bursts = [*res["cold"], *(w["asleep"] for w in res["wake"]), *(w["awake"] for w in res["wake"]), *sw]
    failed, sent = sum(b["failed"] for b in bursts), sum(b["requests"] for b in bursts)
    rows.append(f"| failed requests | {failed} of {sent} | 0 |")
    return rows


def summarize(res: dict[str, Any], ledger: list[dict[str, Any]]) -> str:
    lines = ["# Issue 17 on the H200: on-demand models with vLLM sleep mode, through two gateways", ""]
    lines += table(res, ledger)
    lines += ["", "Ledger rows (prediction and card read at the same moment, after each step):", ""]
    for r in ledger:
        lines.append(
            f"- {r['time']} {r['step']} {r['replica']}: held {r['held_mib']} MiB, predicted "
            f"{r.get('predicted_mib', '-')} MiB, card {r['card_mib']} MiB "
            f"({r.get('off_pct_of_card', '-')} %); "
            f"changing: {r['changing']}"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu.sleep_bench", description=__doc__.splitlines()[0])
    p.add_argument("--gateways", default="http://127.0.0.1:9000,http://127.0.0.1:9001")
    p.add_argument("--supervisor-log", type=Path, required=True)
    p.add_argument("--out", type=Path, default=Path("/tmp/run/results"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--burst-n", type=int, default=64)
    p.add_argument(
        "--probe-n", type=int, default=1, help="requests sent to the sleeping model (burst-n: throughput)"
    )
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--words", type=int, default=200)
    p.add_argument("--cold-n", type=int, default=4)
    p.add_argument("--swap-n", type=int, default=1)
    p.add_argument("--swap-reps", type=int, default=2)
    p.add_argument("--settle-s", type=float, default=90.0)
    p.add_argument("--seed", type=int, default=17)
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    try:
        res = asyncio.run(run(a))
    except Exception as exc:  # keep what the supervisor logged even when a phase fails
        res = {"cold": [], "wake": [], "swap": [], "memory": [], "errors": [repr(exc)]}
        print("FAILED:", repr(exc), flush=True)
    ledger = ledger_lines(a.supervisor_log)
    res["ledger"] = ledger
    (a.out / "sleep.json").write_text(json.dumps(res, indent=1))
    summary = summarize(res, ledger) if not res["errors"] else f"failed: {res['errors']}\n"
    (a.out / "summary.md").write_text(summary)
    print(summary, flush=True)
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
