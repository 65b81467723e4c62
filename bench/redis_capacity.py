"""What the shared state costs Redis per request, per topology (``python -m bench.redis_capacity``).

Four gateways' shared-state clients (the real admission queue and shared prefix index, each gateway with
its own connections, in this process) run, per request, what a gateway runs: acquire, the prefix-index
pick, release; paced at ``--rate`` requests/s for ``--seconds`` against one Redis, a Sentinel setup and a
6-node Cluster, each started on loopback (llmgw_tools/stack/redis_topology.py). From every data node's INFO
(commandstats, net bytes, used CPU) before and after, it prints per request: Redis commands (top level:
EVALSHA and the rest), bytes in and out, Redis CPU microseconds (summed over the masters; replicas'
CPU separately), and each as a ratio to the single server measured in the same run. No engine is involved:
the figures are Redis' side of a request, which does not depend on what serves it.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass, fields
from pathlib import Path

import redis.asyncio as aioredis

from gateway.admission.base import Ticket
from gateway.admission.redis_queue import RedisAdmission
from gateway.redis_clients import blocking_client, fast_client
from gateway.routing.prefix.chain import chain_keys
from gateway.routing.prefix.index import PickInput, ReplicaView
from gateway.routing.prefix.shared_index import SharedIndex
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from llmgw_tools.stack.redis_topology import KINDS, Topology, start

GATEWAYS, MODELS, REPLICAS, CAPACITY = 4, 2, 4, 64


SCRIPT_COMMANDS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall")


@dataclass
class Sample:
    """INFO counters summed over a topology's masters (replicas' commands and CPU apart)."""

    calls: float = 0  # every command the masters ran, those the scripts call included
    scripts: float = 0  # the top-level script calls among them (EVALSHA, EVAL, FCALL)
    bytes_in: float = 0  # the masters' network traffic
    bytes_out: float = 0
    repl_out: float = 0  # the masters' replication stream
    replica_calls: float = 0
    cpu_master_s: float = 0.0
    cpu_replica_s: float = 0.0

    def minus(self, other: Sample, scale: float = 1.0) -> Sample:
        """``self - scale * other``, field by field."""
        return Sample(*(getattr(self, f.name) - scale * getattr(other, f.name) for f in fields(Sample)))

    def per(self, n: int) -> Sample:
        return Sample(*(getattr(self, f.name) / max(1, n) for f in fields(Sample)))


async def sample(ports: list[int]) -> Sample:
    out = Sample()
    for port in ports:
        r = aioredis.Redis(port=port)
        try:
            info = await r.info("all")
        finally:
            await r.aclose()
        calls = sum(int(v["calls"]) for k, v in info.items() if k.startswith("cmdstat_"))
        cpu = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        if info["role"] != "master":
            out.replica_calls += calls
            out.cpu_replica_s += cpu
            continue
        out.calls += calls
        out.scripts += sum(int(info[k]["calls"]) for k in SCRIPT_COMMANDS if k in info)
        out.bytes_in += int(info["total_net_input_bytes"])  # Redis 7.0's totals: the replication stream in
        out.bytes_out += int(info["total_net_output_bytes"])
        out.repl_out += int(info.get("total_net_repl_output_bytes", 0))  # counted apart by later versions
        out.cpu_master_s += cpu
    return out


def views(model: str) -> tuple[ReplicaView, ...]:
    return tuple(ReplicaView(f"{model}-{i}", "i0", 0, 8) for i in range(REPLICAS))


async def request(adm: RedisAdmission, index: SharedIndex, n: int) -> None:
    model = f"model-{n % MODELS}"
    lease, _ = await adm.acquire(Ticket(f"r{n}", model, f"t{n % 8}", 0, 100, 10.0, 10_000), CAPACITY)
    chain = chain_keys(f"system prompt {n % 50} user {n}".encode() * 20, 256, 16)
    await index.pick(model, PickInput(chain, views(model), (5, 4)))
    await lease.release()


async def run_one(topo: Topology, rate: float, seconds: float) -> tuple[Sample, int]:
    keys = RedisKeys("cap")
    gateways = []
    for g in range(GATEWAYS):
        adm = RedisAdmission(
            fast_client(topo.url, 2.0), blocking_client(topo.url, 2.0, 64), keys, f"g{g}", 15.0
        )
        await adm.start()
        gateways.append((adm, SharedIndex(connect(topo.url, socket_timeout=2.0), keys)))
    for n in range(GATEWAYS * MODELS):  # scripts loaded, connections open
        await request(*gateways[n % GATEWAYS], n)
    before, started, tasks = await sample(topo.data_ports), time.monotonic(), set()
    total = int(rate * seconds)
    for n in range(total):
        delay = started + n / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(request(*gateways[n % GATEWAYS], n))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    for adm, _ in gateways:
        await adm.drain()
    after = await sample(topo.data_ports)
    for adm, index in gateways:
        await adm.stop()
        await index.aclose()
    delta = after.minus(before)
    return delta, total


async def main_http(clients: int, seconds: float, baseline: str | None = None) -> None:
    """The ``--http`` mode: real gateway processes and FAKE ENGINE replicas (bench/redis_capacity_http.py);
    ``baseline``: an older commit's gateways measured first, on a one-server topology of their own."""
    from bench import redis_capacity_http as http

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        if baseline is not None:
            tree = http.baseline_tree(baseline, Path(tmp))
            topo = start("single", Path(tmp) / "baseline-redis")
            try:
                rows["baseline"] = await http.measure(Path(tmp), topo, clients, seconds, tree)
            finally:
                topo.stop()
            print(f"baseline ({baseline}, one server): measured", flush=True)
        for kind in KINDS:
            topo = start(kind, Path(tmp) / kind)
            try:
                rows[kind] = await http.measure(Path(tmp), topo, clients, seconds)
            finally:
                topo.stop()
            print(f"{kind}: measured", flush=True)
    print(http.report(rows))


async def main(rate: float, seconds: float) -> None:
    rows: dict[str, tuple[Sample, int, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in KINDS:
            topo = start(kind, Path(tmp) / kind)
            try:
                began = time.monotonic()
                delta, total = await run_one(topo, rate, seconds)
                rows[kind] = (delta, total, total / (time.monotonic() - began))
            finally:
                topo.stop()
    base = rows["single"]
    print(
        f"{GATEWAYS} gateways, {MODELS} models x {REPLICAS} replicas; per request (acquire + pick + release):"
    )
    for kind, (d, total, achieved) in rows.items():
        cpu_us = d.cpu_master_s / total * 1e6
        base_cpu = base[0].cpu_master_s / base[1] * 1e6
        print(
            f"{kind:8s} {achieved:6.0f} req/s  commands {d.calls / total:5.2f}"
            f"  bytes in {d.bytes_in / total:6.0f} out {d.bytes_out / total:6.0f}"
            f"  Redis CPU {cpu_us:6.1f} us (masters; x{cpu_us / base_cpu:.2f} of single),"
            f" replicas {d.cpu_replica_s / total * 1e6:5.1f} us"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--http", action="store_true", help="through 4 real gateway processes and FAKE ENGINE replicas"
    )
    parser.add_argument("--clients", type=int, default=64, help="--http: closed-loop clients in all")
    parser.add_argument(
        "--baseline", default=None, help="--http: also an older commit's gateways, one server (e.g. 3bd38e4^)"
    )
    args = parser.parse_args()
    run_http = main_http(args.clients, args.seconds, args.baseline)
    asyncio.run(run_http if args.http else main(args.rate, args.seconds))
