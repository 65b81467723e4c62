"""What the shared state costs Redis per request, per topology (``python -m bench.redis_capacity``).

Four gateways' shared-state clients (the real admission queue and shared prefix index, each gateway with
its own connections, in this process) run, per request, what a gateway runs: acquire, the prefix-index
pick, release; paced at ``--rate`` requests/s for ``--seconds`` against one Redis, a Sentinel setup and a
6-node Cluster, each started on loopback (tools/stack/redis_topology.py). From every data node's INFO
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
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio as aioredis

from contract.redis_keys import RedisKeys
from contract.redis_url import connect
from gateway.admission.base import Ticket
from gateway.admission.redis_queue import RedisAdmission
from gateway.redis_clients import blocking_client, fast_client
from gateway.routing.prefix.chain import chain_keys
from gateway.routing.prefix.index import PickInput, ReplicaView
from gateway.routing.prefix.shared_index import SharedIndex
from tools.stack.redis_topology import KINDS, Topology, start

GATEWAYS, MODELS, REPLICAS, CAPACITY = 4, 2, 4, 64


@dataclass
class Sample:
    calls: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    cpu_master_s: float = 0.0
    cpu_replica_s: float = 0.0


async def sample(ports: list[int]) -> Sample:
    out = Sample()
    for port in ports:
        r = aioredis.Redis(port=port)
        try:
            info = await r.info("all")
        finally:
            await r.aclose()
        out.calls += sum(int(v["calls"]) for k, v in info.items() if k.startswith("cmdstat_"))
        out.bytes_in += int(info["total_net_input_bytes"])
        out.bytes_out += int(info["total_net_output_bytes"])
        cpu = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        if info["role"] == "master":
            out.cpu_master_s += cpu
        else:
            out.cpu_replica_s += cpu
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
    delta = Sample(
        after.calls - before.calls, after.bytes_in - before.bytes_in, after.bytes_out - before.bytes_out,
        after.cpu_master_s - before.cpu_master_s, after.cpu_replica_s - before.cpu_replica_s,
    )  # fmt: skip
    return delta, total


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
    args = parser.parse_args()
    asyncio.run(main(args.rate, args.seconds))
