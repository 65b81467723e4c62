"""Agentic-trace benchmark (``make bench-agentic``): agent sessions through 2 and 4 gateways, per routing
policy, against the same trace served by one replica alone.

The trace (:func:`agent_sessions`, seeded). ``--sessions`` agent sessions run at once; each is one of
``--agents`` agents, whose long system prompt (instructions and a tool list) every session of that agent
shares. A session's first turn is the user's task (with its own context, ``--task-words``); each later
turn appends the model's answer and a tool result (``--tool-words``), after a tool pause drawn from
``--pause`` (seconds), so every follow-up turn extends the prefix
of the turn before it. Requests stream; the client sends each to the next gateway in turn (as nginx's
round robin does), so one session's turns arrive through different gateways, with no session hint: the
prefix itself is what affinity must follow.

The runs. For each gateway count (``--gateways``, default 2,4) and policy (``--policies``: round robin,
least in-flight, prefix affinity) a fresh set of replicas and gateways serves the trace (fresh caches and
a fresh prefix index: a Redis key prefix of its own). The ideal is the same trace through one gateway to
one replica alone: every request sees one prefix cache.

Engines. The FAKE ENGINE (here and in ``make test``'s short form): ``--replicas`` engines in one process,
each with a model of vLLM's prefix cache (testing/fake_prefix_cache.py) whose missed blocks delay the
first token, so TTFT follows the cache. The hit rates are those of that model, not of vLLM. The same
trace on two real SmolLM2 CPU replicas, hit rates from vLLM's own counters: bench/agentic_real.py
(``make bench-agentic-real``).

What is measured, per run: the prefix-cache hit rate (Σ hits / Σ queries over the replicas' vLLM
counters) and its share of the ideal's; TTFT p50/p90 of follow-up turns (turn 2 on), client side; each
replica's share of the requests; errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
import yaml

from bench.routing import Counters, Sample, percentile, ratio, shares, stream_chat
from bench.routing_sim import ready
from bench.routing_workloads import document, question, sentence
from contract.redis_keys import RedisKeys
from contract.registry import ReplicaRecord, publish
from testing.poll import wait_until
from testing.procs import Proc, free_port, free_port_run, http_ok, spawn, start_redis
from tools.stack.stack import script

MODEL = "agent-model"
POLICIES = ("round_robin", "least_inflight", "prefix_affinity")
IDEAL = "one replica (ideal)"


@dataclass(frozen=True, slots=True)
class AgentSession:
    """One agent session: its agent's system prompt, the user's task, and per later turn the tool pause
    before it (seconds) and the tool's result."""

    id: str
    system: str
    task: str
    steps: tuple[tuple[float, str], ...]


@dataclass(frozen=True, slots=True)
class Options:
    replicas: int = 2
    gateways: tuple[int, ...] = (2, 4)
    policies: tuple[str, ...] = POLICIES
    sessions: int = 32
    agents: int = 3
    turns: int = 5
    system_words: int = 600
    task_words: int = 200
    tool_words: int = 120
    pause: tuple[float, float] = (0.2, 1.0)
    max_tokens: int = 8
    cache_blocks: int = 4096
    prefill_ms_per_block: float = 2.0
    seed: int = 7
    out: Path | None = None


def agent_sessions(o: Options) -> list[AgentSession]:
    """The trace: a task of ``task_words`` words (the session's own context) and tool results of
    ``tool_words`` words (what tools return: files, search results), after the agents' shared prompts."""
    rng = random.Random(o.seed)
    systems = [f"You are agent {a}. Tools: {document(rng, o.system_words)}" for a in range(o.agents)]
    return [
        AgentSession(
            id=f"s{i:03d}",
            system=systems[i % o.agents],
            task=f"{question(rng)} {document(rng, o.task_words)}",
            steps=tuple(
                (rng.uniform(*o.pause), f"{sentence(rng)} {document(rng, o.tool_words)}")
                for _ in range(o.turns - 1)
            ),
        )
        for i in range(o.sessions)
    ]


@dataclass(frozen=True, slots=True)
class RunResult:
    label: str
    gateways: int
    requests: int
    errors: int
    hit_rate: float
    follow_ttft_p50_ms: float
    follow_ttft_p90_ms: float
    shares: list[float]
    of_ideal: float = math.nan


def say(message: str) -> None:
    print(f"[agentic] {message}", file=sys.stderr, flush=True)


async def run_session(http: httpx.AsyncClient, urls: list[str], sent: list[int], s: AgentSession, o: Options,
                      model: str = MODEL) -> list[tuple[int, Sample]]:  # fmt: skip
    """The session's turns in order, each through the next gateway; (turn, sample) per turn."""
    messages = [{"role": "system", "content": s.system}, {"role": "user", "content": s.task}]
    out: list[tuple[int, Sample]] = []
    for turn in range(len(s.steps) + 1):
        if turn:
            pause, result = s.steps[turn - 1]
            await asyncio.sleep(pause)  # the tool runs: part of the trace, not a readiness wait
            messages.append({"role": "user", "content": f"<tool_response>{result}</tool_response>"})
        url = urls[sent[0] % len(urls)]
        sent[0] += 1
        body = {"model": model, "messages": messages, "stream": True, "max_tokens": o.max_tokens,
                "temperature": 0.0}  # fmt: skip
        sample = await stream_chat(http, url, body)
        out.append((turn, sample))
        messages.append({"role": "assistant", "content": sample.text})
    return out


async def replay(urls: list[str], trace: list[AgentSession], o: Options, model: str = MODEL
                 ) -> list[tuple[int, Sample]]:  # fmt: skip
    sent = [0]
    limits = httpx.Limits(max_connections=len(trace), max_keepalive_connections=len(trace))
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        done = await asyncio.gather(*(run_session(http, urls, sent, s, o, model) for s in trace))
    return [x for session in done for x in session]


async def counters(urls: list[str]) -> list[Counters]:
    async with httpx.AsyncClient(timeout=10) as http:
        return [Counters.from_metrics((await http.get(f"{u}/metrics")).text) for u in urls]


async def one_run(label: str, policy: str, replicas: int, gateways: int, redis_url: str,
                  trace: list[AgentSession], o: Options, tmp: Path) -> RunResult:  # fmt: skip
    """Fresh FAKE ENGINE replicas and gateways (a Redis key prefix of their own) serve the trace once."""
    base, prefix = free_port_run(replicas), f"ag{uuid.uuid4().hex[:8]}"
    engine = spawn(
        [sys.executable, "-m", "testing.fake_engine", "--port", str(base), "--ports", str(replicas),
         "--model", MODEL, "--tokens", str(o.max_tokens), "--delay-ms", "2",
         "--prefix-cache-blocks", str(o.cache_blocks),
         "--prefill-ms-per-block", str(o.prefill_ms_per_block)],
        base, tmp / f"engine-{prefix}.log",
    )  # fmt: skip
    urls = [f"http://127.0.0.1:{base + i}" for i in range(replicas)]
    procs: list[Proc] = []
    r = aioredis.Redis.from_url(redis_url)
    try:
        wait_until(lambda: all(http_ok(f"{u}/health") for u in urls), 60, "fake engines")
        for i, u in enumerate(urls):
            rec = ReplicaRecord(id=f"{MODEL}-{i}", model=MODEL, url=u, concurrency=16, instance="i0")
            await publish(r, RedisKeys(prefix), rec, ttl_s=3600)
        fleet = tmp / f"fleet-{prefix}.yaml"
        model = {"name": MODEL, "source": {"path": "/nonexistent"}, "policy": policy, "concurrency": 16,
                 "max_queue": 4096, "max_queue_wait_s": 120}  # fmt: skip
        fleet.write_text(yaml.safe_dump({"models": [model]}))
        for g in range(gateways):
            port = free_port()
            env = {"LLMGW_FLEET_FILE": str(fleet), "LLMGW_REDIS_URL": redis_url, "LLMGW_REDIS_PREFIX": prefix,
                   "LLMGW_GATEWAY_ID": f"{prefix}-gw{g}", "LLMGW_LOG_LEVEL": "WARNING"}  # fmt: skip
            procs.append(
                spawn([script("llmgw-gateway"), "--port", str(port)], port, tmp / f"gw-{prefix}-{g}.log", env)
            )
        for gw in procs:
            wait_until(lambda gw=gw: ready(gw.url, replicas, MODEL), 60, f"gateway {gw.url}")  # type: ignore[misc]
        before = await counters(urls)
        samples = await replay([gw.url for gw in procs], trace, o)
        deltas = [a - b for a, b in zip(await counters(urls), before, strict=True)]
    finally:
        await r.aclose()
        for p in procs:
            p.stop()
        engine.stop()
    return summarise(label, gateways, samples, deltas)


def summarise(
    label: str, gateways: int, samples: list[tuple[int, Sample]], deltas: list[Counters]
) -> RunResult:
    """One run's row from its samples and the replicas' counter deltas (vLLM's, or the model's)."""
    follow = [s.ttft_s for turn, s in samples if turn > 0 and s.ok]
    result = RunResult(
        label=label,
        gateways=gateways,
        requests=len(samples),
        errors=sum(not s.ok for _, s in samples),
        hit_rate=ratio(sum(d.hits for d in deltas), sum(d.queries for d in deltas)),
        follow_ttft_p50_ms=percentile(follow, 50) * 1000,
        follow_ttft_p90_ms=percentile(follow, 90) * 1000,
        shares=shares([d.requests for d in deltas]),
    )
    say(f"{label} through {gateways} gateway(s): hit rate {result.hit_rate:.3f}, errors {result.errors}")
    return result


def of_ideal(run: RunResult, ideal: RunResult) -> RunResult:
    return RunResult(**{**asdict(run), "of_ideal": ratio(run.hit_rate, ideal.hit_rate)})


async def bench(o: Options) -> list[RunResult]:
    trace = agent_sessions(o)
    with tempfile.TemporaryDirectory(prefix="llmgw-agentic-") as d:
        tmp = Path(d)
        redis_proc = start_redis(tmp)
        url = f"redis://127.0.0.1:{redis_proc.port}/0"
        try:
            ideal = await one_run(IDEAL, "round_robin", 1, 1, url, trace, o, tmp)
            results = [ideal]
            for g in o.gateways:
                for policy in o.policies:
                    run = await one_run(policy, policy, o.replicas, g, url, trace, o, tmp)
                    results.append(of_ideal(run, ideal))
        finally:
            redis_proc.stop()
    return results


def table(results: list[RunResult]) -> str:
    head = ("| policy | gateways | requests | errors | hit rate | % of ideal | follow-up TTFT p50 / p90 (ms) "
            "| shares |\n| --- | --- | --- | --- | --- | --- | --- | --- |")  # fmt: skip
    rows = [
        f"| {r.label} | {r.gateways} | {r.requests} | {r.errors} | {r.hit_rate:.1%} | "
        f"{'' if math.isnan(r.of_ideal) else f'{r.of_ideal:.1%}'} | "
        f"{r.follow_ttft_p50_ms:.0f} / {r.follow_ttft_p90_ms:.0f} | "
        f"{' / '.join(f'{s:.0%}' for s in r.shares)} |"
        for r in results
    ]
    return "\n".join([head, *rows])


def parse_args(argv: list[str] | None, d: Options = Options(), doc: str | None = __doc__) -> Options:
    """The options; ``d`` gives the defaults (the real-vLLM mode's are smaller: bench/agentic_real.py)."""
    p = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    p.add_argument("--replicas", type=int, default=d.replicas)
    p.add_argument(
        "--gateways", default=",".join(map(str, d.gateways)), help="gateway counts, comma-separated"
    )
    p.add_argument("--policies", default=",".join(d.policies))
    p.add_argument("--sessions", type=int, default=d.sessions)
    p.add_argument("--agents", type=int, default=d.agents)
    p.add_argument("--turns", type=int, default=d.turns)
    p.add_argument("--system-words", type=int, default=d.system_words)
    p.add_argument("--task-words", type=int, default=d.task_words)
    p.add_argument("--tool-words", type=int, default=d.tool_words)
    p.add_argument(
        "--pause", default=",".join(map(str, d.pause)), help="tool pause range in seconds: MIN,MAX"
    )
    p.add_argument("--max-tokens", type=int, default=d.max_tokens)
    p.add_argument("--cache-blocks", type=int, default=d.cache_blocks, help="each replica's prefix cache")
    p.add_argument("--prefill-ms-per-block", type=float, default=d.prefill_ms_per_block)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    a = p.parse_args(argv)
    lo, hi = (float(x) for x in a.pause.split(","))
    return Options(
        replicas=a.replicas, gateways=tuple(int(x) for x in a.gateways.split(",")),
        policies=tuple(a.policies.split(",")), sessions=a.sessions, agents=a.agents, turns=a.turns,
        system_words=a.system_words, task_words=a.task_words, tool_words=a.tool_words, pause=(lo, hi),
        max_tokens=a.max_tokens, cache_blocks=a.cache_blocks,
        prefill_ms_per_block=a.prefill_ms_per_block, seed=a.seed, out=a.out,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return report(parse_args(argv), bench)


def report(o: Options, run: Callable[[Options], Coroutine[Any, Any, list[RunResult]]]) -> int:
    """Run the benchmark ``run`` (FAKE ENGINE or real vLLM), print its table, write its JSON."""
    started = time.perf_counter()
    results = asyncio.run(run(o))
    print(table(results))
    say(f"done in {time.perf_counter() - started:.0f} s")
    if o.out is not None:
        o.out.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
