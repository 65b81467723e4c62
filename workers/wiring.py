"""The one wiring of the control plane: the owner of the replicas (``Supervisor``), the reconcile loop,
the activator, the scaler (:mod:`workers.autoscale`) and its page-cache warm-up of the models that can
go to zero (:mod:`workers.autoscale.warmup`), their metrics and the state file, built by
:func:`build_control_plane` and run by :func:`running` with one start and one shutdown order.
``llmgw-workers`` (and through it the embedded stack), the tests and the benchmarks all run it this way.

Every long-lived task runs in one :class:`llmgw_contract.supervision.TaskGroup`: one that ends while the
control plane runs is logged and counted, and ``llmgw-workers`` exits non-zero. The shutdown order: the
activator is told to close, the activator's, the reconciler's, the scaler's and the warm-up's loops are
cancelled, the
owner drains every replica (within the grace period) and stops them, its own loop ends, the state file
is emptied.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from llmgw_contract.fleet_file import FleetWatch
from llmgw_contract.kv_feeds import KvFeeds
from llmgw_contract.registry import RegistryWriter
from llmgw_contract.replica_metrics import SupervisorMetrics
from llmgw_contract.supervision import TaskGroup
from workers.autoscale.loop import Autoscaler
from workers.autoscale.warmup import Warmup
from workers.converge.loop import HeadroomProbe, LaunchFor, Reconciler
from workers.host.gpu import GpuReader, MemoryProbe, nvidia_smi_probe, nvidia_smi_reading
from workers.life.adopt import StateFile, check_entries
from workers.life.observe import Observer
from workers.life.owner import Replica, Supervisor, SupervisorOptions
from workers.ondemand.activator import Activator, ActivatorOptions

__all__ = ["ControlPlane", "build_control_plane", "control_loops", "running"]


@dataclass
class ControlPlane:
    sup: Supervisor
    rec: Reconciler
    act: Activator
    metrics: SupervisorMetrics
    state: StateFile | None = None
    tasks: TaskGroup = field(default_factory=TaskGroup)
    auto: Autoscaler | None = None
    warmup: Warmup | None = None


def build_control_plane(
    registry: RegistryWriter,
    client: httpx.AsyncClient,
    options: SupervisorOptions,
    watch: FleetWatch,
    launch_for: LaunchFor,
    headroom: HeadroomProbe,
    log_dir: Path,
    n_devices: int,
    estimate: Callable[[Replica], int],
    free_bytes: Callable[[], int | None],
    *,
    metrics: SupervisorMetrics | None = None,
    state: StateFile | None = None,
    sd_file: Path | None = None,
    activator: ActivatorOptions | None = None,
    memory_probe: MemoryProbe = nvidia_smi_probe,
    gpu_reading: GpuReader = nvidia_smi_reading,
    weights: Callable[[Replica], int] = lambda r: 0,
) -> ControlPlane:
    """The owner, the reconcile loop and the activator over one registry, one metrics registry and (when
    given) one state file that every replica change rewrites."""
    metrics = metrics or SupervisorMetrics()
    observer = Observer(metrics, sd_file)

    def on_change(r: Replica) -> None:
        observer(r)
        if state is not None:
            state.save(rec.entries())

    feeds = KvFeeds.from_env(registry.redis, registry.keys)
    sup = Supervisor([], registry, client, options, on_change, memory_probe, metrics, feeds)
    rec = Reconciler(sup, watch, launch_for, headroom, log_dir, n_devices, metrics)
    keys = registry.keys
    act = Activator(
        sup, keys, lambda: rec.fleet, estimate, free_bytes, metrics, activator or ActivatorOptions(),
        gpu_reading=gpu_reading, weights=weights,
    )  # fmt: skip
    warmup = Warmup(rec, metrics)
    auto = Autoscaler(rec, registry.redis, keys, metrics, act=act, prepared=warmup.warm)
    return ControlPlane(sup, rec, act, metrics, state, TaskGroup(metrics.failed), auto, warmup)


@asynccontextmanager
async def running(plane: ControlPlane) -> AsyncIterator[TaskGroup]:
    """Adopt what the state file names, then run the three loops while the block runs; the shutdown
    order (module doc) when it ends. Yields the task group (``wait_died_or``)."""
    if plane.state is not None:
        await plane.rec.adopt(await check_entries(plane.state.load(), plane.sup.client))
    tasks = plane.tasks
    tasks.spawn("supervisor", plane.sup.run())
    tasks.spawn("reconciler", plane.rec.run())
    tasks.spawn("activator", plane.act.run())
    if plane.auto is not None:
        tasks.spawn("autoscaler", plane.auto.run())
    if plane.warmup is not None:
        tasks.spawn("warmup", plane.warmup.run())
    try:
        yield tasks
    finally:
        await shutdown(plane)


async def shutdown(plane: ControlPlane) -> None:
    """The one shutdown order (module doc)."""
    tasks = plane.tasks
    plane.act.close()
    loops = [*(["autoscaler"] if plane.auto is not None else []), *(["warmup"] if plane.warmup else [])]
    await tasks.close("activator", "reconciler", *loops)
    tasks.expect_end("supervisor")
    await plane.sup.drain()
    await tasks.join("supervisor")
    await tasks.close()
    if plane.state is not None:
        plane.state.save([])


@asynccontextmanager
async def control_loops(
    sup: Supervisor,
    rec: Reconciler,
    act: Activator,
    auto: Autoscaler | None = None,
    warmup: Warmup | None = None,
) -> AsyncIterator[TaskGroup]:
    """:func:`running` for parts built apart (tests, benchmarks): the same tasks and shutdown order
    (``auto``: the scaler's loop, ``warmup``: the warm-up's, when given)."""
    plane = ControlPlane(sup, rec, act, sup.metrics, None, TaskGroup(sup.metrics.failed), auto, warmup)
    async with running(plane) as tasks:
        yield tasks
