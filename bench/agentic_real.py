"""The agentic trace (bench/agentic.py) on two real SmolLM2 CPU vLLM replicas (``make bench-agentic-real``).

The replicas, Redis and the gateways are those of the routing benchmark (bench/routing.py ``Bench``, its
fleet bench/fleet-routing.yaml: SmolLM2 ×2, one replica per core): the workers start once; per run (the
single-replica ideal through one gateway, then each policy through 2 and 4 gateways) the gateways start
fresh, both replicas' prefix caches are emptied (vLLM's ``POST /reset_prefix_cache``) with the shared
prefix index, and the trace is replayed, each request through the next gateway in turn. The hit rate is
vLLM's own: Σ ``vllm:prefix_cache_hits`` / Σ ``vllm:prefix_cache_queries`` over the replicas (tokens;
only full blocks hit); shares from ``vllm:request_success``; TTFT of follow-up turns, client side.

Sized for a 2-core machine (a few minutes for the seven runs): 8 sessions of 4 turns, 2 agents with
300-word system prompts, 100-word tasks, 60-word tool results, tool pauses of 0.5-2 s, 8 output tokens.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

from bench import routing
from bench.agentic import Options, RunResult, agent_sessions, of_ideal, parse_args, replay, report, summarise
from bench.routing import Bench, Run
from llmgw_tools.stack.stack import REPO

IDEAL = "one replica (ideal)"
REAL = Options(
    sessions=8, agents=2, turns=4, system_words=300, task_words=100, tool_words=60, pause=(0.5, 2.0)
)


async def one_run(b: Bench, run: Run, label: str, o: Options) -> RunResult:
    """Fresh gateways and emptied caches; the trace replayed through the run's gateways."""
    gw = await b.start_gateways(run)
    try:
        await b.reset_caches()
        before = await b.counters()
        ports = b.config.gateway_ports[: run.gateways]
        urls = [f"http://{b.config.host}:{p}" for p in ports]
        samples = await replay(urls, agent_sessions(o), o, b.model)
        deltas = await b.settled(before, sum(s.ok for _, s in samples))
    finally:
        await gw.down()
    return summarise(label, run.gateways, samples, deltas)


async def bench_real(o: Options, run_dir: Path = REPO / ".run/bench-agentic-real") -> list[RunResult]:
    ropts = routing.Options(gateways=o.gateways, max_tokens=o.max_tokens, run_dir=run_dir)
    async with httpx.AsyncClient(timeout=300) as http:
        b = Bench(ropts, http)
        try:
            await b.start_workers()
            ideal = await one_run(b, Run(routing.IDEAL, gateways=1), IDEAL, o)
            results = [ideal]
            for g in o.gateways:
                for policy in o.policies:
                    results.append(of_ideal(await one_run(b, Run(policy, gateways=g), policy, o), ideal))
            return results
        finally:
            await b.close()


def main(argv: list[str] | None = None) -> int:
    return report(parse_args(argv, REAL, __doc__), bench_real)


if __name__ == "__main__":
    sys.exit(main())
