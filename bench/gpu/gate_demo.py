"""The supervisor's free-memory gate on a real GPU: start the fleet's replicas with a short gate deadline
and print what the supervisor reports (bench/gpu/fleet-h200-extra.yaml asks for more than is free).

    python -m bench.gpu.gate_demo --fleet bench/gpu/fleet-h200-extra.yaml --log-dir /tmp/run/logs
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

import httpx
import redis.asyncio as aioredis

from llmgw_contract.fleet import load_fleet
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryTiming, RegistryWriter
from workers.host.gpu import nvidia_smi_probe
from workers.life.owner import Replica, Supervisor, SupervisorOptions
from workers.replica.launch import build_launch, plan_replicas
from workers.replica.weights import weights_for


async def main_async(a: argparse.Namespace) -> int:
    fleet = load_fleet(a.fleet)
    specs = plan_replicas(fleet.models, fleet.defaults, 1)
    reps = [Replica(s, build_launch(s, weights_for(s.model)), a.log_dir) for s in specs]
    options = SupervisorOptions(free_memory_deadline_s=a.deadline, free_memory_poll_s=1.0)
    redis = aioredis.Redis.from_url(a.redis_url)
    async with httpx.AsyncClient() as client:
        sup = Supervisor(
            reps,
            RegistryWriter(redis, RedisKeys("gatedemo"), RegistryTiming()),
            client,
            options,
            memory_probe=nvidia_smi_probe,
        )
        started = [await sup.start_with_retries(r) for r in reps]
        for r in reps:
            if r.process.alive:
                await r.process.stop()
    await redis.aclose()
    for r, ok in zip(reps, started, strict=True):
        print(f"{r.spec.id}: started={ok} report={r.failure.message() if r.failure else None}")
    return 0 if not any(started) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fleet", type=Path, default=Path("bench/gpu/fleet-h200-extra.yaml"))
    p.add_argument("--log-dir", type=Path, default=Path(".run/logs"))
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--deadline", type=float, default=10.0)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stdout
    )
    return asyncio.run(main_async(p.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
