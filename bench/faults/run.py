"""`make faults`: the fault-injection suite (issue 43). Per Redis topology (single, Sentinel, Cluster) one
stack (bench/faults/stack.py: FAKE ENGINE replicas under the real supervisor, two gateways, real nginx and
Redis, keys on), a mixed load through nginx (bench/faults/workload.py), and the faults of
bench/faults/inject.py one at a time, in an order drawn from ``--seed``. After each fault the checkers
(bench/faults/checks.py) read the engines' logs, Redis, the metrics and the process table, and the row
says: generations run twice, requests without an answer or clear error, streams cut without an error
event (not counted where the fault killed the gateway), capacity held ``settle_s`` (17 s, past the 15 s
lease TTL) after the load stopped, silent task deaths, orphan processes, a slow reader's stream the
gateway did not end (counted as stalled, its generation aborted at the engine), seconds until the
registry was whole again after a Redis outage. The table goes to stdout and, with its date and seed, to
``--out`` (JSON). One cell again:

    python -m bench.faults --seed 7 --fault kill9-engine --topology single
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import json
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.faults import checks
from bench.faults.ctx import Ctx
from bench.faults.inject import FAULTS, REDIS_FAULTS, back_to_strength, not_injected
from bench.faults.report import COLUMNS, MUST_ANSWER, Cell, row, table
from bench.faults.stack import (
    MARKER,
    descendants_of,
    key_states,
    make_stack,
    metrics_texts,
    metrics_urls,
    registry_whole,
    run_processes,
    tenants,
)
from bench.faults.workload import Load, mix
from llmgw_contract.registry import RegistryTiming
from llmgw_tools.stack.redis_topology import KINDS
from llmgw_tools.stack.stack import REPO, Stack
from workers.life.adopt import StateFile

log = logging.getLogger("llmgw.faults")


@dataclass(frozen=True)
class Plan:
    clients: int = 4
    warm_s: float = 1.5  # load before the fault
    after_s: float = 3.0  # load after the fault ended
    max_tokens: int = 16
    client_timeout_s: float = 20.0
    settle_s: float = 17.0
    """Capacity still held this long after the load stopped counts: past the lease TTL (15 s), which gives
    back a lease whose release was lost, so what is left is held beyond every bound of the design."""


async def sample_registry(stack: Stack, min_s: float, until_s: float) -> list[tuple[float, bool]]:
    """(time, whole) every 0.25 s for at least ``min_s`` (past the records' TTL: a heartbeat that died
    in the outage shows only once the records it no longer refreshes expire), then until whole for 2 s
    running, or ``until_s`` passed."""
    samples: list[tuple[float, bool]] = []
    start, whole_since = time.monotonic(), None
    while time.monotonic() - start < until_s:
        now, whole = time.monotonic(), await registry_whole(stack)
        samples.append((now, whole))
        whole_since = (whole_since or now) if whole else None
        if now - start >= min_s and whole_since is not None and now - whole_since >= 2.0:
            break
        await asyncio.sleep(0.25)
    return samples


def replica_logs(stack: Stack) -> list[Path]:
    services = {s.log_file for s in stack.services}
    return sorted(p for p in stack.logs.glob("*.log") if p not in services and p.name != "workers.log")


async def settled_capacity(stack: Stack, settle_s: float) -> list[str]:
    """What is still held after up to ``settle_s`` (polled: releases land in the background)."""
    end, held = time.monotonic() + settle_s, ["not read"]
    while time.monotonic() < end:
        with contextlib.suppress(Exception):
            held = checks.capacity_held(await key_states(stack))
        if not held:
            return []
        await asyncio.sleep(0.5)
    return held


def find_orphans(stack: Stack, marker: str) -> list[checks.ProcInfo]:
    procs = run_processes(marker)
    own = descendants_of(os.getpid(), procs)
    state = stack.config.run_dir / "workers-state.json"
    recorded = {e.pid for e in StateFile(state).load()} if state.exists() else set()
    return checks.orphans(procs, own, recorded)


async def run_cell(
    stack: Stack,
    keys: list[dict[str, str]],
    fault: str,
    cell_id: str,
    seed: int,
    plan: Plan,
    marker: str,
    seen_orphans: set[int],
) -> Cell:
    topology = stack.config.redis_topology
    if why := not_injected(fault, topology):  # said in the table, without a load to run
        return Cell(fault, topology, seed, note=why, not_injected=why)
    cell = Cell(fault, topology, seed, redis_outage=fault in REDIS_FAULTS)
    load = Load(stack.config.nginx_url, keys, mix(plan.max_tokens), f"flt.{cell_id}.", plan.clients,
                plan.client_timeout_s, seed=seed)  # fmt: skip
    before_texts = await metrics_texts(metrics_urls(stack))  # one a process: a restarted one counts anew
    loader = asyncio.create_task(load.run())
    await asyncio.sleep(plan.warm_s)
    ctx = Ctx(stack, load)
    log.info("fault %s (%s)", fault, cell.topology)
    try:
        cell.note = await FAULTS[fault](ctx)
    except Exception as exc:  # the fault itself failed: said, and the run goes on
        log.exception("fault %s failed", fault)
        cell.note = f"the fault failed: {type(exc).__name__}: {exc}"
        cell.problems.append(cell.note)
    strike = ctx.strike
    sampler = None
    if strike.outage_end is not None:
        sampler = asyncio.create_task(sample_registry(stack, RegistryTiming().ttl_s + 3.0, 40.0))
    await asyncio.sleep(plan.after_s)
    load.stop.set()
    await asyncio.wait_for(loader, plan.client_timeout_s + 30)
    if sampler is not None:
        assert strike.outage_end is not None
        cell.registry_back_s = checks.registry_back_s(await sampler, strike.outage_end)
    exits = list(strike.exits)
    exits += [checks.Exit(s.name, s.returncode() or 0, False) for s in stack.services if not s.alive]
    whole = True
    try:
        await back_to_strength(stack)
    except Exception as exc:
        whole = False
        cell.problems.append(f"not back to strength within 60 s: {type(exc).__name__}: {exc}")
    cell.capacity_held = await settled_capacity(stack, plan.settle_s)
    after_texts = await metrics_texts(metrics_urls(stack))
    cell.task_failures = checks.task_failures_rise(before_texts, after_texts)
    back = whole if cell.registry_back_s is None or not cell.redis_outage else True
    cell.task_deaths = checks.task_deaths(exits, back, bool(cell.task_failures))
    found = [p for p in find_orphans(stack, marker) if p.pid not in seen_orphans]  # the cell's own
    cell.orphans = [f"{p.name} (pid {p.pid}, parent {p.ppid})" for p in found]
    seen_orphans.update(p.pid for p in found)
    cell.exits = [f"{e.name} {e.status}" for e in exits]
    outcomes = load.outcomes + strike.outcomes
    report = checks.client_report(outcomes, strike.gateway_killed)
    cell.sent, cell.answered, cell.clear = report.sent, report.answered, report.clear
    cell.no_answer, cell.cut_streams = report.no_answer, report.cut_streams
    if fault in MUST_ANSWER:
        cell.needless_errors = checks.needless_errors(outcomes)
    cell.clear_errors = dict(Counter(o.detail for o in outcomes if o.outcome == checks.CLEAR).most_common())
    runs = checks.count_engine_runs(replica_logs(stack), f"flt.{cell_id}.", strike.cuts)
    cell.at_engines, cell.ran_twice = len(runs.ids), runs.ran_twice
    cell.rerun_after_kill, cell.continued = len(runs.rerun_after_kill), sum(runs.moved.values())
    stalled = checks.stalled_rise(before_texts, after_texts)
    cell.not_dropped = checks.not_dropped(strike.stalled, stalled, checks.read_logs(replica_logs(stack)))
    cell.not_injected = strike.not_injected
    if report.answered and not runs.ids:
        cell.problems.append(
            "no generation counted at the engines (are they run with --enable-log-requests?)"
        )
    return cell


@contextlib.contextmanager
def run_environment(marker: str) -> Iterator[None]:
    """While the run lasts, this process' environment (every child inherits it) carries the run's marker
    (the orphan scan) and ``PYTHONPATH`` set to this tree: the console scripts (``llmgw-gateway``) of an
    editable install import the tree the install points at, which need not be the one under test."""
    saved = {k: os.environ.get(k) for k in (MARKER, "PYTHONPATH")}
    os.environ[MARKER] = marker
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), saved["PYTHONPATH"]) if p)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.asynccontextmanager
async def running_stack(tmp: Path, topology: str) -> AsyncIterator[Stack]:
    stack = make_stack(tmp, topology, base_port=random.randrange(20000, 30000, 20))
    try:
        await stack.up()
        yield stack
    finally:
        await stack.down()


async def run_topology(topology: str, faults: list[str], seed: int, plan: Plan, tmp: Path) -> list[Cell]:
    """One stack of ``topology``; ``faults`` in turn on it; the stack down; its leftovers as orphans."""
    marker = f"{topology}-{seed}-{os.urandom(3).hex()}"
    cells: list[Cell] = []
    seen: set[int] = set()  # orphans already reported by a cell
    with run_environment(marker):
        async with running_stack(tmp / topology, topology) as stack:
            keys = await tenants(stack)
            for i, fault in enumerate(faults):
                cell = await run_cell(
                    stack, keys, fault, f"{marker.replace('-', '_')}.{i}", seed, plan, marker, seen
                )
                print(row(cell), flush=True)
                cells.append(cell)
        left = [p for p in run_processes(marker) if p.pid != os.getpid()]
    new = [p for p in left if p.pid not in seen]  # an orphan a cell reported is not counted twice
    if new and cells:
        cells[-1].orphans += [f"after the stack stopped: {p.name} (pid {p.pid})" for p in new]
    for p in left:  # reported; the run leaves nothing behind on a shared machine
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    return cells


def order(faults: list[str], seed: int) -> list[str]:
    """The faults in the seed's order (the same seed, the same order)."""
    return random.Random(seed).sample(faults, len(faults))


async def run_matrix(
    topologies: list[str], faults: list[str], seed: int, plan: Plan, tmp: Path
) -> list[Cell]:
    cells = []
    for topology in topologies:
        cells += await run_topology(topology, order(faults, seed), seed, plan, tmp)
    return cells


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="faults", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--seed", type=int, default=None, help="the faults' order (default: drawn and printed)")
    p.add_argument("--fault", action="append", choices=list(FAULTS), help="only these faults")
    p.add_argument("--topology", action="append", choices=list(KINDS), help="only these (default: all)")
    p.add_argument("--clients", type=int, default=Plan.clients)
    p.add_argument("--out", type=Path, default=None, help="write the table as JSON here")
    p.add_argument("--keep-logs", type=Path, default=None, help="copy the stacks' logs here at the end")
    return p.parse_args(argv)


async def main_async(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.randrange(1 << 16)
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    topologies, faults = args.topology or list(KINDS), args.fault or list(FAULTS)
    print(f"faults: seed {seed}, topologies {topologies}, {len(faults)} faults", flush=True)
    print(" | ".join([*COLUMNS, "verdict", "what happened"]), flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llmgw-faults-") as tmp:
        try:
            cells = await run_matrix(topologies, faults, seed, Plan(clients=args.clients), Path(tmp))
        finally:
            if args.keep_logs is not None:
                shutil.copytree(
                    tmp, args.keep_logs, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.sock")
                )
    took = time.monotonic() - started
    print(table(cells, seed, date))
    print(f"{len(cells)} cells in {took:.0f} s; reproduce one: python -m bench.faults --seed {seed} "
          "--fault NAME --topology T")  # fmt: skip
    if args.out is not None:
        doc = {
            "date": date,
            "seed": seed,
            "took_s": round(took),
            "cells": [dataclasses.asdict(c) for c in cells],
        }
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    failed = [c for c in cells if c.violations() and not c.not_injected]
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
