"""``llmgw-workers``: run the fleet's vLLM replicas under the supervisor until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from llmgw_contract.build_info import add_version_flag
from llmgw_contract.fleet import Fleet, FleetError
from llmgw_contract.fleet_file import FleetWatch, read_fleet
from llmgw_contract.logs import configure_logging
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from llmgw_contract.registry import RegistryTiming, RegistryWriter
from llmgw_contract.replica_metrics import SupervisorMetrics, serve_metrics
from llmgw_contract.supervision import EXIT_TASK_DIED
from llmgw_contract.vllm_probe import probe_client
from workers.converge.headroom import cpu_need_bytes, headroom_probe, host_available_bytes, weights_bytes
from workers.host.gpu import ProbeError, gpu_memory, nvidia_smi_probe
from workers.life.adopt import StateFile
from workers.life.owner import Replica, RestartBackoff, SupervisorOptions
from workers.planner import make_config_loader
from workers.planner.budgets import BudgetError, PlannedBudgets, arithmetic, needs_plan, planned_budgets
from workers.planner.model_shape import shape_from_config
from workers.planner.plan import estimate_model
from workers.replica.launch import Launch, ReplicaSpec, build_launch
from workers.replica.oom import needed_bytes
from workers.replica.placement import placement_problems
from workers.replica.weights import weights_for
from workers.wiring import build_control_plane, running

log = logging.getLogger("llmgw.workers")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="llmgw-workers", description="Run and supervise the fleet's vLLM replicas."
    )
    add_version_flag(p)
    p.add_argument("--fleet", type=Path, required=True, help="fleet YAML file")
    p.add_argument("--redis-url", default=os.environ.get("LLMGW_REDIS_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument("--redis-prefix", default=os.environ.get("LLMGW_REDIS_PREFIX", "llmgw"))
    p.add_argument("--log-dir", type=Path, default=Path(".run/logs"), help="one log file per replica")
    p.add_argument("--models-dir", type=Path, default=None, help="prepared model folders")
    p.add_argument(
        "--devices",
        type=int,
        default=None,
        help="CPU cores (or GPUs) to spread over (default: the GPUs nvidia-smi reports for a GPU fleet, "
        "else the CPU cores)",
    )
    p.add_argument(
        "--drain-grace", type=float, default=30.0, help="seconds in-flight work may take on SIGTERM"
    )
    p.add_argument("--sd-file", type=Path, default=None, help="Prometheus file_sd JSON of the ready replicas")
    p.add_argument("--metrics-port", type=int, default=9400, help="port of the supervisor's own /metrics")
    p.add_argument("--ready-deadline", type=float, default=600.0, help="seconds a replica may take to start")
    restart = RestartBackoff()
    p.add_argument(
        "--restart-max-delay",
        type=float,
        default=restart.max_s,
        help="longest wait before restarting a replica that died (the wait doubles from 1 s)",
    )
    p.add_argument(
        "--restart-give-up-after",
        type=int,
        default=restart.give_up_after,
        help="consecutive failed restarts after which a replica is left failed",
    )
    p.add_argument(
        "--state-file",
        type=Path,
        default=Path(".run/workers-state.json"),
        help="the running replicas (pid, port, id), for a restarted supervisor to adopt",
    )
    return p.parse_args(argv)


def gpu_sizes(fleet: Fleet) -> dict[int, int] | None:
    """GPU index -> total bytes as nvidia-smi reports them, for a GPU fleet; a fleet those GPUs cannot
    place is refused (:class:`BudgetError`, one line per replica: the model, the devices, the arithmetic).
    None on CPUs, or where nvidia-smi cannot answer (then only ``auto`` budgets refuse)."""
    if fleet.defaults.device != "gpu":
        return None
    try:
        devices = {d.index: d.total_bytes for d in gpu_memory()}
    except ProbeError as exc:
        if needs_plan(fleet):
            raise BudgetError(f"budget auto needs the GPUs' sizes: {exc}") from exc
        log.warning("the GPUs cannot be read (%s): the placement is not checked", exc)
        return None
    problems = placement_problems(fleet.models, sorted(devices))
    if problems:
        raise BudgetError("the fleet cannot be placed: " + "\n".join(problems))
    return devices


def auto_budgets(fleet: Fleet, models_dir: Path | None) -> PlannedBudgets:
    """The planner's budgets for ``auto`` models, on the GPUs nvidia-smi reports (nothing to plan: {});
    first the placement check of :func:`gpu_sizes`."""
    devices = gpu_sizes(fleet)
    if not needs_plan(fleet):
        return {}
    if devices is None:
        raise BudgetError("budget auto needs GPUs: the fleet's defaults.device is not gpu")
    planned = planned_budgets(fleet, devices, make_config_loader(models_dir or Path(".cache/models")))
    for r in planned.values():
        log.info("%s", arithmetic(r))
    return planned


def launcher(args: argparse.Namespace) -> Callable[[ReplicaSpec], Launch]:
    def launch_for(spec: ReplicaSpec) -> Launch:
        return build_launch(spec, weights_for(spec.model, args.models_dir))

    return launch_for


def estimator(args: argparse.Namespace, reserve_bytes: int) -> Callable[[Replica], int]:
    """What a replica is expected to take before it was ever measured: on a CPU its KV cache, weights and
    overhead; on a GPU its budget of the card plus the reserve (the card's size read once)."""
    totals: dict[int, int] = {}

    def estimate(r: Replica) -> int:
        if r.on_gpu:
            if r.spec.device not in totals:
                mem = nvidia_smi_probe(r.spec.device)
                totals[r.spec.device] = mem.total_bytes if mem is not None else 0
            return needed_bytes(r.budget, totals[r.spec.device], reserve_bytes)
        weights = weights_bytes(weights_for(r.spec.model, args.models_dir))
        return cpu_need_bytes(r.spec.model.budget.kv_cache_gib or 1, weights)

    return estimate


def weights_sizer(args: argparse.Namespace) -> Callable[[Replica], int]:
    """A model's weights in memory (the planner's arithmetic from config.json; the files' size when it has
    none): what sleep level 1 copies to host RAM. Read once per model."""
    load = make_config_loader(args.models_dir or Path(".cache/models"))
    sizes: dict[str, int] = {}

    def size(r: Replica) -> int:
        m = r.spec.model
        if m.name not in sizes:
            try:
                sizes[m.name] = estimate_model(m, shape_from_config(load(m))).weight_bytes
            except (OSError, ValueError, KeyError) as exc:
                log.warning("model=%s weights size from its files (no usable config.json: %s)", m.name, exc)
                sizes[m.name] = weights_bytes(weights_for(m, args.models_dir))
        return sizes[m.name]

    return size


def device_count(args: argparse.Namespace) -> int:
    """``--devices``, else the GPUs nvidia-smi reports for a GPU fleet (a replica never gets a GPU index
    the host lacks), else the CPU cores."""
    if args.devices is not None:
        return int(args.devices)
    try:
        if read_fleet(args.fleet).defaults.device == "gpu":
            return max(1, len(gpu_memory()))
    except (FleetError, ProbeError) as exc:
        log.warning("devices: %s; spreading over the CPU count", exc)
    return os.cpu_count() or 1


async def serve(args: argparse.Namespace, launch_for: Callable[[ReplicaSpec], Launch] | None = None) -> int:
    """Adopt what a previous supervisor left running, converge to the fleet file, drain on SIGTERM or
    SIGINT, re-read the file on SIGHUP. ``launch_for`` builds each replica's command (vLLM's, from the
    fleet, unless given). Returns the exit status: non-zero when a long-lived task died."""
    redis = connect(args.redis_url, socket_timeout=2.0, socket_connect_timeout=2.0)
    timing = RegistryTiming(drain_grace_s=args.drain_grace)
    backoff = RestartBackoff(max_s=args.restart_max_delay, give_up_after=args.restart_give_up_after)
    options = SupervisorOptions(ready_deadline_s=args.ready_deadline, timing=timing, backoff=backoff)
    metrics = SupervisorMetrics()
    server = await serve_metrics(metrics, "127.0.0.1", args.metrics_port)
    registry = RegistryWriter(redis, RedisKeys(args.redis_prefix), timing)
    async with probe_client() as client:
        watch = FleetWatch(args.fleet)
        plane = build_control_plane(
            registry, client, options, watch, launch_for or launcher(args),
            headroom_probe(args.models_dir, nvidia_smi_probe, options.gpu_reserve_bytes),
            args.log_dir, device_count(args), estimator(args, options.gpu_reserve_bytes),
            host_available_bytes,
            metrics=metrics, state=StateFile(args.state_file), sd_file=args.sd_file,
            weights=weights_sizer(args),
        )  # fmt: skip
        plane.rec.budgets = lambda fleet: auto_budgets(fleet, args.models_dir)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, lambda: watch.request("SIGHUP"))
        async with running(plane) as tasks:
            died = await tasks.wait_died_or(stop)
        if died:
            log.error("a control-plane task died (%s): exiting %d", ",".join(tasks.dead), EXIT_TASK_DIED)
    server.close()
    await redis.aclose()
    return EXIT_TASK_DIED if died else 0


def main(argv: list[str] | None = None, launch_for: Callable[[ReplicaSpec], Launch] | None = None) -> int:
    """Refuse at start (exit 2, one line) a fleet that cannot be read, planned or placed; else serve it.
    ``launch_for``: as in :func:`serve`."""
    args = parse_args(argv)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    configure_logging(logging.INFO)  # text, or JSON lines with LLMGW_LOG_FORMAT=json
    try:
        auto_budgets(read_fleet(args.fleet), args.models_dir)
    except (FleetError, BudgetError) as exc:
        print(f"llmgw-workers: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(serve(args, launch_for))


if __name__ == "__main__":
    raise SystemExit(main())
