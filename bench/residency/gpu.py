"""The residency trace on the lent GPU (``bench/gpu/residency.sh``): the live replay of
:mod:`bench.residency.live` (its warm-up, paced streams and records, :func:`bench.residency.live.replay`)
through a gateway already serving in front of the real supervisor and vLLM, at time scale 1.0.

There are no fake memory files on a GPU: each model's state when a request arrives is read from the
registry (READY, DRAINING: awake; STARTING, WAKING, DRAINING: moving) and, for a sleeping replica, from the
supervisor's log (its last ``vllm sleep level N`` / ``asleep (level N|stopped)`` line: :class:`Levels`).
The ledger's figure against nvidia-smi is the supervisor's own ``ledger gpu:0 after ...`` lines (the
prediction beside the card's reading at every wake and sleep, :func:`bench.gpu.sleep_bench.ledger_lines`);
settled: no other model changing then. nvidia-smi is also read every ``--smi-every-s`` beside the states.
Progress lines (one per event: a warm-up answer, a model's state change, a slow or failed request, and
every 30 s a count) go to stdout, which the recipe's ``wait`` phase follows. Writes ``residency-gpu.json``
and ``summary.md`` under ``--out``.

    python -m bench.residency.gpu --gateway http://127.0.0.1:9000 --redis-url redis://127.0.0.1:6383/0 \\
        --supervisor-log /tmp/run-residency/supervisor.log --out /tmp/run-residency/results
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import yaml

from bench.gpu.sleep_bench import ledger_lines
from bench.residency.live import Ask, replay, trace_args, trace_params
from bench.residency.results import Record, dump, report_of, result, table
from bench.residency.run import FIRST_TOKEN_TARGET_S
from bench.residency.stack import Observed, Running, sample
from bench.residency.trace import generate, names
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord, ReplicaState

TOKENS = 128
"""Tokens each request streams on the card, with ``ignore_eos`` (random weights): about the trace's 2 s
of decode at vLLM's eager-mode pace for a 7B model (a parameter; the JSON keeps each TTFT only)."""
SLEEP_LINE = re.compile(
    r"replica=(?P<replica>\S+) (?:vllm sleep level (?P<vllm>\d)|asleep \((?:level (?P<level>\d)|stopped)\)"
    r"|keeps \d+ of \d+ MiB asleep: stopped|sleep at level \d failed)"
)
AWAKE = (ReplicaState.READY, ReplicaState.REPLACING, ReplicaState.DRAINING)


@dataclass(slots=True)
class Levels:
    """Per replica, how its last sleep left it (asleep1, asleep2, stopped), from the supervisor's log."""

    log: Path
    pos: int = 0
    level: dict[str, str] = field(default_factory=dict)

    def feed(self, text: str) -> None:
        """Take the log's lines in ``text``."""
        for m in SLEEP_LINE.finditer(text):
            n = m["vllm"] or m["level"]
            self.level[m["replica"]] = f"asleep{n}" if n and n != "0" else "stopped"

    def read(self) -> None:
        """Take the log's complete lines written since the last read."""
        with contextlib.suppress(FileNotFoundError), self.log.open("rb") as f:
            f.seek(self.pos)
            chunk = f.read()
            end = chunk.rfind(b"\n") + 1
            self.pos += end
            self.feed(chunk[:end].decode(errors="replace"))

    def held(self, records: Sequence[ReplicaRecord]) -> dict[str, str]:
        """Per model, the state its replica holds: awake while routable or draining, failed, else (asleep,
        starting, waking) what its last sleep left (stopped: never started, or its process ended)."""
        self.read()
        out: dict[str, str] = {}
        for r in records:
            if r.state in AWAKE:
                out[r.model] = "awake"
            elif r.state is ReplicaState.FAILED:
                out[r.model] = "failed"
            else:
                out[r.model] = self.level.get(r.id, "stopped")
        return out


def fleet_for(text: str, weights: str = "real", arm: str = "autopilot") -> str:
    """``bench/gpu/fleet-residency.yaml`` as the recipe runs it: ``weights`` ``dummy`` reads vLLM's random
    weights from the config alone (no level 2: a model past host RAM is stopped); ``arm`` ``today`` turns
    the autopilot off (the idle timeout and the eviction at the moment)."""
    fleet = yaml.safe_load(text)
    if arm == "today":
        fleet["defaults"]["autopilot"] = False
    for m in fleet["models"]:
        if weights == "dummy":
            m["source"]["path"] = m["source"]["path"].removesuffix("-real")
            m["engine"]["load_format"] = "dummy"
    return str(yaml.safe_dump(fleet, sort_keys=False))


def dry_fleet(text: str, scale: float, models_dir: str, base_port: int, delay_ms: float) -> str:
    """The same fleet for the recipe's dry run: each replica the FAKE GPU ENGINE taught the H200
    (``--profile h200``) at ``scale``, decoding a token every ``delay_ms``; the idle timeout scaled too."""
    fleet = yaml.safe_load(text)
    fleet["defaults"]["base_port"] = base_port
    for m in fleet["models"]:
        m["source"]["path"] = m["source"]["path"].replace("/tmp/gpu-models", models_dir)
        taught = ["--profile", "h200", "--time-scale", str(scale), "--delay-ms", f"{delay_ms:.3f}"]
        m["engine"]["extra_args"] = taught
        m["idle_timeout_s"] = m["idle_timeout_s"] * scale
    return str(yaml.safe_dump(fleet, sort_keys=False))


def smi() -> tuple[int, int] | None:
    """nvidia-smi's used and total MiB of GPU 0 (None: no answer)."""
    q = ["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(q, capture_output=True, text=True, timeout=10, check=True).stdout
        used, total = (int(x) for x in out.splitlines()[0].split(","))
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None
    return used, total


@dataclass(slots=True)
class Watch:
    """What the replay sees while it runs: the answered records, nvidia-smi's readings beside the states,
    and the progress lines printed."""

    obs: Observed
    t0: list[float]
    answered: list[Record] = field(default_factory=list)
    smi: list[list[object]] = field(default_factory=list)
    """Rows of [unix time, used MiB, total MiB, {model: state}]."""
    before: float = field(init=False)

    def __post_init__(self) -> None:
        self.before = self.t0[0]

    @property
    def started(self) -> bool:
        """True once the replay set the trace's start (``t0[0]``)."""
        return self.t0[0] != self.before

    def now(self) -> float:
        """Real seconds since the trace began (before it: since the sampler's start)."""
        return time.perf_counter() - self.t0[0]

    def say(self, line: str) -> None:
        print(f"[replay {time.strftime('%H:%M:%S')}] {line}", flush=True)

    def done(self, rec: Record) -> None:
        self.answered.append(rec)
        if rec.error or (rec.ttft_s or 0.0) > FIRST_TOKEN_TARGET_S:
            what = rec.error[:160] if rec.error else f"ttft {rec.ttft_s:.3f} s"
            self.say(f"t={rec.t:7.1f} {rec.model} arrived {rec.state}: {what}")

    async def states(self) -> None:
        """Print each model's state change as it is noted (the replay restarts the timeline at t=0)."""
        seen = 0
        while True:
            line = self.obs.timeline
            seen = min(seen, len(line))
            for t, model, label in line[seen:]:
                self.say(f"{'t' if self.started else 'warm-up t'}={t:7.1f} {model} {label}")
            seen = len(line)
            await asyncio.sleep(0.5)

    async def counts(self, sent: list[float], every_s: float = 30.0) -> None:
        """Every ``every_s``: the requests sent and answered so far, errors, first tokens within 1 s."""
        while True:
            await asyncio.sleep(every_s)
            if not self.started:
                continue
            got = self.answered
            ok = sum(1 for r in got if not r.error and (r.ttft_s or 0) <= FIRST_TOKEN_TARGET_S)
            due = sum(1 for t in sent if t <= self.now())
            self.say(f"progress: {due} sent, {len(got)} answered, {sum(1 for r in got if r.error)} errors, "
                     f"{ok} within 1 s")  # fmt: skip

    async def readings(self, every_s: float) -> None:
        """nvidia-smi every ``every_s`` with the states then."""
        while True:
            reading = await asyncio.to_thread(smi)
            if reading is not None:
                self.smi.append([round(time.time(), 2), *reading, dict(sorted(self.obs.slots.items()))])
            await asyncio.sleep(every_s)


def ledger_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The ledger's prediction against nvidia-smi: every reading, the settled ones (no other model changing)
    and the settled ones after each replica's first (which compares with the planner's estimate)."""
    first: set[str] = set()
    settled, measured = [], []
    for r in rows:
        if "off_pct_of_card" not in r:
            continue
        off = abs(r["off_pct_of_card"])
        if r["changing"] == "none":
            settled.append(off)
            if r["replica"] in first:
                measured.append(off)
        first.add(r["replica"])

    def of(xs: list[float]) -> dict[str, Any]:
        return {"n": len(xs), "max_pct": round(max(xs, default=0.0), 3),
                "within_1pct": sum(1 for x in xs if x <= 1.0)}  # fmt: skip

    every = [abs(r["off_pct_of_card"]) for r in rows if "off_pct_of_card" in r]
    return {"every": of(every), "settled": of(settled), "settled_after_first": of(measured)}


def summary(rows_table: str, ledger: dict[str, Any]) -> str:
    head = "| ledger vs nvidia-smi (% of the card) | readings | max | within 1 % |"
    lines = ["```", rows_table, "```", "", head, "|---|---|---|---|"]
    for k, v in ledger.items():
        lines.append(f"| {k} | {v['n']} | {v['max_pct']:.3f} | {v['within_1pct']} |")
    return "\n".join(lines) + "\n"


async def run(args: argparse.Namespace) -> tuple[list[Record], Watch, float]:
    params = trace_params(args)
    trace = generate(params)
    obs, t0 = Observed(), [time.perf_counter()]
    watch = Watch(obs, t0)
    levels = Levels(args.supervisor_log)

    async def held(records: list[ReplicaRecord]) -> dict[str, str]:
        return levels.held(records)

    redis = aioredis.Redis.from_url(args.redis_url)
    keys = RedisKeys(args.redis_prefix)
    models = names(params.models)
    tasks = [
        asyncio.create_task(sample(obs, models, args.time_scale, redis, keys, t0, held)),
        asyncio.create_task(watch.states()),
        asyncio.create_task(watch.counts([r.t * args.time_scale for r in trace])),
        asyncio.create_task(watch.readings(args.smi_every_s)),
    ]
    started = time.perf_counter()
    try:
        running = Running(args.gateway, obs, t0, args.supervisor_log)
        ask = Ask(args.tokens, ignore_eos=True)
        recs = await replay(
            running, trace, args.time_scale, ask, args.settle_s, watch.say, watch.done, args.drain_s
        )
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await redis.aclose()
    return recs, watch, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    trace_args(ap)
    ap.add_argument("--gateway", required=True, help="the gateway's base URL")
    ap.add_argument("--redis-url", required=True)
    ap.add_argument("--redis-prefix", default="llmgw")
    ap.add_argument("--supervisor-log", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True, help="a folder for residency-gpu.json and summary.md")
    ap.add_argument("--arm", default="autopilot", help="the arm's name (the fleet decides the policy)")
    ap.add_argument("--time-scale", type=float, default=1.0, help="real seconds per trace second")
    ap.add_argument("--tokens", type=int, default=TOKENS)
    ap.add_argument("--settle-s", type=float, default=90.0, help="longest wait for the warm-up's moves")
    late = "requests unanswered this long after the last one was sent are cancelled (errors)"
    ap.add_argument("--drain-s", type=float, default=120.0, help=late)
    ap.add_argument("--smi-every-s", type=float, default=5.0)
    ap.add_argument("--fleet", type=Path, help="the fleet file, kept in the results")
    args = ap.parse_args(argv)
    recs, watch, took = asyncio.run(run(args))
    params = trace_params(args)
    rows = [result(args.arm, recs, params.duration_s)]
    ledger = ledger_lines(args.supervisor_log)
    led = ledger_summary(ledger)
    head: dict[str, object] = {
        "source": "live replay on the lent GPU: real gateway, supervisor and vLLM (bench/gpu/residency.sh)",
        "command": "python -m bench.residency.gpu " + " ".join(argv if argv is not None else sys.argv[1:]),
        "time_scale": args.time_scale,
        "tokens_per_request": args.tokens,
        "fleet_yaml": args.fleet.read_text() if args.fleet else None,
        "trace_start_unix": round(time.time() - watch.now(), 2),
        "ledger_summary": led,
    }
    out = report_of(head, params, rows, took)
    out.update(ledger=ledger, smi=watch.smi, timeline=[[round(t, 2), m, s] for t, m, s in watch.obs.timeline])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "residency-gpu.json").write_text(dump(out, ("ledger", "smi", "timeline")))
    text = summary(table(rows), led)
    (args.out / "summary.md").write_text(text)
    print(text, flush=True)
    return 0 if all(r.errors == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
