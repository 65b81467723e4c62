"""Redis' cost per request through real gateways (``python -m bench.redis_capacity --http``).

Four ``llmgw-gateway`` processes, each with its own connections and defaults (admission on, the shared
prefix index on, prefix-affinity routing), in front of FAKE ENGINE replicas (testing/fake_engine.py, not a
model: two models x two replicas, registered in the registry as the supervisor would). A closed-loop
HTTP/1.1 load (bench/loadgen.py, one keep-alive connection per client, clients spread over the gateways
and the models) runs for ``--seconds``; every answer is checked. Redis' side is read from every data
node's INFO (commandstats calls, net bytes in/out, used CPU) before and after the load, and also over an
idle window of the same length with the gateways up, so the per-request figures are given both all-in
(the gateways' periodic beats, registry polls and in-flight shares included) and net of that idle
background. Each topology (one server, Sentinel, Cluster) is started on loopback
(llmgw_tools/stack/redis_topology.py) and measured in the same run, the single server first: the ratios are
to it.

``--baseline COMMIT`` adds a row measured first, on a one-server topology of its own: the gateways of an
older commit (a ``git archive`` copy, run with ``PYTHONPATH`` pointing at it; its replicas registered by
its own ``llmgw_contract.registry``), e.g. the code before issue 28 (``3bd38e4^``); ratios to it are given
too.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
import yaml

from bench.loadgen import Result, Target, run
from bench.redis_capacity import Sample, sample
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from llmgw_contract.registry import ReplicaRecord, publish
from llmgw_tools.stack.ports import bindable, free_port
from llmgw_tools.stack.redis_topology import Topology
from llmgw_tools.stack.stack import REPO
from testing.poll import wait_until
from testing.procs import Proc, http_ok, spawn

GATEWAYS, MODELS, REPLICAS, CAPACITY = 4, 2, 2, 256
PREFIX = "cap"
GATEWAY_BIN = str(Path(sys.executable).parent / "llmgw-gateway")


@dataclass
class Measured:
    load: Sample
    idle: Sample
    result: Result
    seconds: float

    @property
    def requests(self) -> int:
        return self.result.ok + len(self.result.errors)

    def per_request(self, net: bool) -> Sample:
        """The load window's delta per request; ``net``: less the idle window's, scaled to the same time."""
        scale = self.seconds / IDLE_S if net else 0.0
        return self.load.minus(self.idle, scale).per(self.requests)


IDLE_S = 10.0


def model(i: int) -> str:
    return f"cap-model-{i}"


def fleet_text() -> str:
    models = [
        {"name": model(i), "source": {"path": "/nonexistent"}, "concurrency": CAPACITY, "max_queue": 4096}
        for i in range(MODELS)
    ]
    return yaml.safe_dump({"models": models})


def start_engines(tmp: Path) -> list[tuple[str, Proc]]:
    """One FAKE ENGINE process per model, serving its replicas on consecutive ports."""
    out = []
    for i in range(MODELS):
        port = free_port_block(REPLICAS)
        argv = [sys.executable, "-m", "testing.fake_engine", "--port", str(port), "--ports", str(REPLICAS)]
        proc = spawn([*argv, "--model", model(i), "--tokens", "4"], port, tmp / f"engine-{i}.log")
        out.append((model(i), proc))
    for _, proc in out:
        wait_until(answers(f"http://127.0.0.1:{proc.port + REPLICAS - 1}/health"), 20, "engine")
    return out


def answers(url: str) -> Callable[[], bool]:
    return lambda: http_ok(url)


def free_port_block(n: int) -> int:
    for _ in range(100):
        port = free_port()
        if all(bindable(port + k) for k in range(n)):
            return port
    raise RuntimeError(f"no {n} consecutive free ports")


async def register(redis_url: str, engines: list[tuple[str, Proc]]) -> None:
    redis = connect(redis_url, socket_timeout=5.0)
    try:
        for name, proc in engines:
            for k in range(REPLICAS):
                url = f"http://127.0.0.1:{proc.port + k}"
                rec = ReplicaRecord(id=f"{name}-{k}", model=name, url=url, concurrency=CAPACITY)
                await publish(redis, RedisKeys(PREFIX), rec, 3600)
    finally:
        await redis.aclose()


REGISTER = """
import asyncio, sys
import redis.asyncio as aioredis
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord, publish
async def main(url, prefix, concurrency, replicas):
    redis = aioredis.Redis.from_url(url)
    for spec in replicas:
        rid, model, replica_url = spec.split(",")
        rec = ReplicaRecord(id=rid, model=model, url=replica_url, concurrency=concurrency)
        assert await publish(redis, RedisKeys(prefix), rec, 3600)
    await redis.aclose()
asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]))
"""


def baseline_tree(commit: str, tmp: Path) -> Path:
    """A copy of ``commit``'s tree (``git archive``), for its gateways to run from."""
    tree = tmp / f"baseline-{commit.replace('^', '-').replace('~', '-')}"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def register_with(tree: Path, redis_url: str, engines: list[tuple[str, Proc]]) -> None:
    """Register the replicas with ``tree``'s own registry code (an older commit's record format)."""
    specs = [f"{n}-{k},{n},http://127.0.0.1:{proc.port + k}" for n, proc in engines for k in range(REPLICAS)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, "-c", REGISTER, redis_url, PREFIX, str(CAPACITY), *specs]
    subprocess.run(argv, env=env, check=True, cwd=tree)


def start_gateways(tmp: Path, topo: Topology, fleet: Path, tree: Path | None = None) -> list[Proc]:
    env = {
        **({"PYTHONPATH": str(tree)} if tree is not None else {}),
        "LLMGW_FLEET_FILE": str(fleet),
        "LLMGW_REDIS_URL": topo.url,
        "LLMGW_REDIS_PREFIX": PREFIX,
        "LLMGW_LOG_LEVEL": "WARNING",
    }
    gws = []
    for g in range(GATEWAYS):
        port = free_port()
        argv = [GATEWAY_BIN, "--port", str(port), "--gateway-id", f"{topo.kind}-g{g}"]
        gws.append(spawn(argv, port, tmp / f"gw-{topo.kind}-{g}-{tree is not None}.log", env))
    for gw in gws:
        wait_until(answers(f"http://127.0.0.1:{gw.port}/ready"), 60, "gateway")
    return gws


def targets(gateways: list[Proc]) -> list[Target]:
    """One target per gateway and model; prompts differ per target so the prefix index records and picks."""
    out = []
    for g, gw in enumerate(gateways):
        for m in range(MODELS):
            text = f"shared system prompt {m} " * 30 + f"user {g}"
            body = {"model": model(m), "messages": [{"role": "user", "content": text}], "max_tokens": 4}
            out.append(Target("127.0.0.1", gw.port, "/v1/chat/completions", orjson.dumps(body), False, 4))
    return out


async def load(tgts: list[Target], clients: int, seconds: float) -> Result:
    per = max(1, clients // len(tgts))
    parts = await asyncio.gather(*(run(t, per, 10**9, seconds) for t in tgts))
    merged = Result(started=min(p.started for p in parts), finished=max(p.finished for p in parts))
    for p in parts:
        merged.latencies += p.latencies
        merged.errors += p.errors
    return merged


async def measure(
    tmp: Path, topo: Topology, clients: int, seconds: float, tree: Path | None = None
) -> Measured:
    """One topology's row; ``tree``: the gateways of that older code (bench/redis_capacity_http docs)."""
    here = tmp / (topo.kind if tree is None else tree.name)
    engines = start_engines(here)
    fleet = here / "fleet.yaml"
    fleet.write_text(fleet_text())
    gateways: list[Proc] = []
    try:
        if tree is None:
            await register(topo.url, engines)
        else:
            register_with(tree, topo.url, engines)
        gateways = start_gateways(here, topo, fleet, tree)
        tgts = targets(gateways)
        await load(tgts, len(tgts), 3.0)  # warm: scripts loaded, connections open, replicas known
        before = await sample(topo.data_ports)
        await asyncio.sleep(IDLE_S)
        idle = (await sample(topo.data_ports)).minus(before)
        before, began = await sample(topo.data_ports), time.monotonic()
        result = await load(tgts, clients, seconds)
        took = time.monotonic() - began
        return Measured((await sample(topo.data_ports)).minus(before), idle, result, took)
    finally:
        for proc in [*gateways, *(p for _, p in engines)]:
            proc.stop()


def report(rows: dict[str, Measured]) -> str:
    """Per request, net of the idle background (all-in CPU too); ratios to the single server."""
    base_net, base_all = rows["single"].per_request(True), rows["single"].per_request(False)
    lines = [
        f"{GATEWAYS} gateway processes, {MODELS} models x {REPLICAS} FAKE ENGINE replicas; Redis per request "
        "(net of the idle background; masters unless said; x: to this code's single server):",
        "topology   req/s errors scripts cmds  bytes in  out  repl-out  CPU us (x single)  all-in CPU us "
        "(x single)  replicas: cmds CPU us",
    ]
    for kind, m in rows.items():
        n, a = m.per_request(True), m.per_request(False)
        lines.append(
            f"{kind:9s} {m.result.ok / m.seconds:6.0f} {len(m.result.errors):6d} {n.scripts:7.2f}"
            f" {n.calls:5.1f} {n.bytes_in:8.0f} {n.bytes_out:4.0f} {n.repl_out:8.0f}"
            f" {n.cpu_master_s * 1e6:7.1f} (x{n.cpu_master_s / base_net.cpu_master_s:.2f})"
            f" {a.cpu_master_s * 1e6:10.1f} (x{a.cpu_master_s / base_all.cpu_master_s:.2f})"
            f" {n.replica_calls:14.1f} {n.cpu_replica_s * 1e6:6.1f}"
        )
        idle_cpu = m.idle.cpu_master_s / IDLE_S * 100
        lines.append(f"{'':9s} idle background: {m.idle.calls / IDLE_S:.0f} commands/s, {idle_cpu:.2f} % CPU")
        if "baseline" in rows and kind != "baseline":
            old_n, old_a = rows["baseline"].per_request(True), rows["baseline"].per_request(False)
            lines.append(
                f"{'':9s} to the baseline: CPU x{n.cpu_master_s / old_n.cpu_master_s:.2f},"
                f" all-in x{a.cpu_master_s / old_a.cpu_master_s:.2f}, commands x{n.calls / old_n.calls:.2f}"
            )
        for err in sorted(set(m.result.errors))[:3]:
            lines.append(f"{'':9s} error: {err[:160]}")
    return "\n".join(lines)
