"""``llmgw-workers``: run the fleet's vLLM replicas under the supervisor until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
import sys
from pathlib import Path

import redis.asyncio as aioredis

from contract.fleet import Fleet, FleetError, load_fleet
from contract.redis_keys import RedisKeys
from contract.registry import RegistryTiming, RegistryWriter
from contract.replica_metrics import SupervisorMetrics, serve_metrics
from contract.vllm_probe import probe_client
from workers.budgets import BudgetError, PlannedBudgets, arithmetic, needs_plan, planned_budgets
from workers.gpu import ProbeError, gpu_memory
from workers.launch import ReplicaSpec, build_launch, plan_replicas
from workers.observe import Observer
from workers.planner import make_config_loader
from workers.supervisor import Replica, Supervisor, SupervisorOptions
from workers.weights import weights_for

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
log = logging.getLogger("llmgw.workers")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="llmgw-workers", description="Run and supervise the fleet's vLLM replicas."
    )
    p.add_argument("--fleet", type=Path, required=True, help="fleet YAML file")
    p.add_argument("--redis-url", default=os.environ.get("LLMGW_REDIS_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument("--redis-prefix", default=os.environ.get("LLMGW_REDIS_PREFIX", "llmgw"))
    p.add_argument("--log-dir", type=Path, default=Path(".run/logs"), help="one log file per replica")
    p.add_argument("--models-dir", type=Path, default=None, help="prepared model folders")
    p.add_argument(
        "--devices", type=int, default=os.cpu_count() or 1, help="CPU cores (or GPUs) to spread over"
    )
    p.add_argument(
        "--drain-grace", type=float, default=30.0, help="seconds in-flight work may take on SIGTERM"
    )
    p.add_argument("--sd-file", type=Path, default=None, help="Prometheus file_sd JSON of the ready replicas")
    p.add_argument("--metrics-port", type=int, default=9400, help="port of the supervisor's own /metrics")
    p.add_argument("--ready-deadline", type=float, default=600.0, help="seconds a replica may take to start")
    return p.parse_args(argv)


def auto_budgets(fleet: Fleet, models_dir: Path | None) -> PlannedBudgets:
    """The planner's budgets for ``auto`` models, on the GPUs nvidia-smi reports (nothing to plan: {})."""
    if not needs_plan(fleet):
        return {}
    try:
        devices = {d.index: d.total_bytes for d in gpu_memory()}
    except ProbeError as exc:
        raise BudgetError(f"budget auto needs the GPUs' sizes: {exc}") from exc
    planned = planned_budgets(fleet, devices, make_config_loader(models_dir or Path(".cache/models")))
    for r in planned.values():
        log.info("%s", arithmetic(r))
    return planned


def replica(spec: ReplicaSpec, planned: PlannedBudgets, args: argparse.Namespace) -> Replica:
    """One replica, with the planner's budget and back-off floor where its model's budget is ``auto``."""
    plan = planned.get((spec.model.name, spec.index)) if spec.model.budget.auto else None
    if plan is not None:
        spec = dataclasses.replace(spec, gpu_memory_utilization=plan.gpu_memory_utilization)
    launch = build_launch(spec, weights_for(spec.model, args.models_dir))
    return Replica(spec, launch, args.log_dir, floor=plan.backoff_floor if plan else None)


def build_replicas(fleet: Fleet, args: argparse.Namespace) -> list[Replica]:
    planned = auto_budgets(fleet, args.models_dir)
    return [replica(s, planned, args) for s in plan_replicas(fleet.models, fleet.defaults, args.devices)]


async def serve(replicas: list[Replica], args: argparse.Namespace) -> None:
    redis = aioredis.Redis.from_url(args.redis_url, socket_timeout=2.0, socket_connect_timeout=2.0)
    timing = RegistryTiming(drain_grace_s=args.drain_grace)
    options = SupervisorOptions(ready_deadline_s=args.ready_deadline, timing=timing)
    metrics = SupervisorMetrics()
    server = await serve_metrics(metrics, "127.0.0.1", args.metrics_port)
    registry = RegistryWriter(redis, RedisKeys(args.redis_prefix), timing)
    async with probe_client() as client:
        sup = Supervisor(replicas, registry, client, options, Observer(metrics, args.sd_file))
        loop = asyncio.get_running_loop()
        drained = asyncio.Event()

        async def drain() -> None:
            await sup.drain()
            drained.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(
                sig, lambda: asyncio.ensure_future(drain()) if not sup.stopping.is_set() else None
            )
        await sup.run()
        await drained.wait()
    server.close()
    await redis.aclose()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stdout)
    try:
        replicas = build_replicas(load_fleet(args.fleet), args)
    except (FleetError, BudgetError) as exc:
        print(f"llmgw-workers: {exc}", file=sys.stderr)
        return 2
    asyncio.run(serve(replicas, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
