"""How long a killed gateway's queue holds the other gateway back, per topology (the long form of
issue 28's "a gateway killed with 10 requests queued: the other gateway's requests granted within 3 s";
``make redis-failover`` runs it after the failover).

Per topology (``--topology`` picks; all three by default), ``--rounds`` times: a real ``llmgw-gateway``
process with default settings runs 2 requests and queues 10 (capacity 2, a FAKE ENGINE replica that holds
each request 30 s), the other gateway's admission queues 2 behind them, the process is killed -9, and
the time until the other's 2 are granted is measured (testing/reclaim.py). Prints each round's time and
min / median / max per topology, with the design's bound (1.5 beats + a beat); exit status 1 when a round
took 3 s or more.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

from gateway.admission.liveness import StampTiming
from llmgw_contract.redis_keys import RedisKeys
from llmgw_tools.stack.redis_topology import KINDS, start
from testing.procs import start_fake_engine
from testing.reclaim import killed_gateway_reclaim

TARGET_S = 3.0


async def run_topology(kind: str, tmp: Path, rounds: int) -> list[float]:
    topology = start(kind, tmp / "redis")
    engine = start_fake_engine(tmp / "engine", "--latency-ms", "30000")
    times = []
    try:
        for r in range(rounds):
            took = await killed_gateway_reclaim(tmp, topology.url, RedisKeys(f"rc{r}"), engine.url)
            print(f"{kind} round {r + 1}: granted {took:.2f} s after the kill", flush=True)
            times.append(took)
    finally:
        engine.stop()
        topology.stop()
    return times


def table(rows: dict[str, list[float]]) -> str:
    bound = StampTiming(1.0).reclaim_bound_s()
    lines = [
        f"| Topology | rounds | min | median | max | (design bound {bound:.1f} s, target {TARGET_S:.0f} s) |",
        "|---|---|---|---|---|---|",
    ]
    for kind, times in rows.items():
        lines.append(
            f"| {kind} | {len(times)} | {min(times):.2f} s | {statistics.median(times):.2f} s"
            f" | {max(times):.2f} s | {'met' if max(times) < TARGET_S else 'NOT met'} |"
        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> int:
    rows = {}
    with tempfile.TemporaryDirectory(prefix="llmgw-reclaim-") as tmp:
        for kind in args.topology or list(KINDS):
            rows[kind] = await run_topology(kind, Path(tmp) / kind, args.rounds)
    print(table(rows))
    return 0 if all(max(t) < TARGET_S for t in rows.values()) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topology", action="append", choices=list(KINDS))
    p.add_argument("--rounds", type=int, default=5)
    return asyncio.run(main_async(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
