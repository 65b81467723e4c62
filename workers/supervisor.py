"""The supervisor: starts one vLLM process per replica, one after another, registers each ready
replica, restarts crashed ones with back-off, and drains them all on SIGTERM.

Start path on a GPU (vLLM mis-sizes the KV cache of processes that start together on one device):
replicas that share a device start strictly one at a time (a lock per device, which restarts take too),
each only when the previous is ready and the device's free memory covers ``budget x total + reserve``
(polled through a :data:`~workers.gpu.MemoryProbe` until a deadline).  A start that fails with
out-of-memory is retried with the budget lowered by 0.05 down to the replica's floor; past it, the
replica stays stopped and one log line (:class:`~workers.oom.StartReport`) names the model, the budget,
the free memory and what to change.  On CPUs none of this applies: failed starts are retried as they are.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from contract.backoff import Backoff
from contract.drain import wait_until_idle
from contract.registry import (
    ROUTABLE,
    RegistryTiming,
    RegistryWriter,
    ReplicaRecord,
    ReplicaState,
    new_instance_id,
)
from contract.replica_metrics import SupervisorMetrics
from workers.adopt import AdoptedProcess
from workers.gpu import DeviceMemory, MemoryProbe, gib, nvidia_smi_probe
from workers.launch import Launch, ReplicaSpec, with_budget
from workers.oom import (
    BACKOFF_STEP,
    VLLM_DEFAULT_BUDGET,
    Oom,
    StartReport,
    detect_oom,
    needed_bytes,
    next_budget,
)
from workers.planner import DEFAULT_RESERVE_BYTES
from workers.process import ReplicaProcess, StartFailed

log = logging.getLogger("llmgw.workers")


@dataclass(frozen=True, slots=True)
class RestartBackoff:
    """Delay before the n-th consecutive restart (:class:`Backoff`); reset after a healthy run.

    Consecutive counts every restart since the replica last ran ``healthy_after_s``, failed starts
    included; past ``give_up_after`` the replica is left FAILED (a fleet change may replace it).
    """

    base_s: float = 1.0
    max_s: float = 30.0
    healthy_after_s: float = 60.0
    give_up_after: int = 10

    def delay(self, consecutive: int) -> float:
        return Backoff(self.base_s, self.max_s).delay(consecutive)

    def consecutive_after(self, consecutive: int, ran_s: float) -> int:
        return 1 if ran_s >= self.healthy_after_s else consecutive + 1


@dataclass(frozen=True, slots=True)
class SupervisorOptions:
    ready_deadline_s: float = 600.0
    timing: RegistryTiming = field(default_factory=RegistryTiming)
    backoff: RestartBackoff = RestartBackoff()
    max_start_attempts: int = 3
    """Attempts for failures other than a GPU out-of-memory (those are bounded by the budget floor)."""
    oom_step: float = BACKOFF_STEP
    gpu_reserve_bytes: int = DEFAULT_RESERVE_BYTES
    """What a vLLM process takes beyond its budget (CUDA context, graphs): part of the free-memory gate."""
    free_memory_deadline_s: float = 120.0
    free_memory_poll_s: float = 1.0
    redis_check_s: float = 0.5
    """How often Redis's run id is read, to republish at once after a Redis restart."""


class NotEnoughMemory(Exception):
    def __init__(self, report: StartReport) -> None:
        super().__init__(report.message())
        self.report = report


class Replica:
    """One replica's process and its published state; owned by the supervisor.

    ``floor`` is the lowest budget the OOM back-off may try: the fleet's
    ``budget.min_gpu_memory_utilization`` unless a plan gives one (``ReplicaPlan.backoff_floor``).
    """

    def __init__(
        self,
        spec: ReplicaSpec,
        launch: Launch,
        log_dir: Path,
        floor: float | None = None,
        slot: int | None = None,
    ) -> None:
        self.spec = spec
        self.slot = spec.index if slot is None else slot
        """The model's replica position it fills (workers.reconcile); a replacement takes the old one's."""
        self.retired = False
        """Set once the reconciler stops it for good: its watch ends, nothing restarts it."""
        self.watcher: asyncio.Task[None] | None = None
        self.process = ReplicaProcess(launch, log_dir / f"{spec.id}.log")
        self.state = ReplicaState.STARTING
        self.restarts = 0
        self.started_at = 0.0
        self.startup_s = 0.0
        self.floor = spec.model.budget.min_gpu_memory_utilization if floor is None else floor
        self.budgets_tried: list[float] = []
        self.failure: StartReport | None = None
        self.instance = new_instance_id()

    @property
    def on_gpu(self) -> bool:
        return self.spec.device_kind == "gpu"

    @property
    def budget(self) -> float:
        return self.spec.gpu_memory_utilization or VLLM_DEFAULT_BUDGET

    def set_budget(self, budget: float) -> None:
        """Use ``budget`` from the next start on (the spec, the published record and vLLM's argv)."""
        self.spec = dataclasses.replace(self.spec, gpu_memory_utilization=budget)
        self.process.launch = with_budget(self.process.launch, budget)

    def record(self) -> ReplicaRecord:
        s = self.spec
        return ReplicaRecord(
            id=s.id,
            model=s.model.name,
            url=s.url,
            state=self.state,
            concurrency=s.model.concurrency,
            device=f"{s.device_kind}:{s.device}",
            budget=s.budget_label,
            instance=self.instance,
        )


class Supervisor:
    def __init__(
        self,
        replicas: list[Replica],
        registry: RegistryWriter,
        client: httpx.AsyncClient,
        options: SupervisorOptions,
        on_change: Callable[[Replica], None] = lambda r: None,
        memory_probe: MemoryProbe = nvidia_smi_probe,
        metrics: SupervisorMetrics | None = None,
    ) -> None:
        self.replicas, self.registry, self.client, self.options = replicas, registry, client, options
        self.metrics = metrics or SupervisorMetrics()
        self.on_change = on_change
        self.probe = memory_probe
        self.stopping = asyncio.Event()
        self.device_locks: dict[int, asyncio.Lock] = {}
        self.watchers: list[asyncio.Task[None]] = []
        self.republished = 0

    async def set_state(self, r: Replica, state: ReplicaState) -> None:
        r.state = state
        self.on_change(r)
        if state is ReplicaState.STARTING:
            await self.registry.remove(r.record())
        else:
            await self.registry.publish(r.record())

    async def start(self, r: Replica) -> None:
        """Start a replica and wait until /health answers and /v1/models lists it."""
        await self.set_state(r, ReplicaState.STARTING)
        log.info(
            "replica=%s starting on %s:%d (%s)",
            r.spec.id,
            r.spec.device_kind,
            r.spec.device,
            r.spec.budget_label,
        )
        if r.on_gpu:
            r.budgets_tried.append(r.budget)
        r.instance = new_instance_id()
        if port_taken(r.spec.host, r.spec.port):
            raise StartFailed(
                f"port {r.spec.port} is already taken by another process: not starting (whatever answers "
                "there was not started by this supervisor and is never published)"
            )
        await r.process.start()
        r.startup_s = await r.process.wait_until_listed(
            r.spec.url, r.spec.model.name, self.options.ready_deadline_s, self.client
        )
        r.started_at = time.monotonic()
        await self.set_state(r, ReplicaState.READY)
        log.info(
            "replica=%s ready in %.1f s pid=%s url=%s", r.spec.id, r.startup_s, r.process.pid, r.spec.url
        )
        if r.on_gpu:
            await self.log_device(r, "after ready")

    async def read_device(self, device: int) -> DeviceMemory | None:
        return await asyncio.to_thread(self.probe, device)

    async def log_device(self, r: Replica, when: str) -> None:
        mem = await self.read_device(r.spec.device)
        if mem is not None:
            log.info(
                "replica=%s gpu:%d %s: used_mib=%d free_mib=%d total_mib=%d",
                r.spec.id,
                r.spec.device,
                when,
                mem.used_bytes >> 20,
                mem.free_bytes >> 20,
                mem.total_bytes >> 20,
            )

    async def wait_for_memory(self, r: Replica) -> DeviceMemory | None:
        """Poll the device until its free memory covers the replica's budget plus the reserve.

        Returns the last reading (None where the device cannot be read: the gate is then open);
        raises :class:`NotEnoughMemory` at the deadline.
        """
        opts = self.options
        loop = asyncio.get_running_loop()
        started = loop.time()
        waiting = False
        while True:
            mem = await self.read_device(r.spec.device)
            if mem is None:
                log.warning(
                    "replica=%s gpu:%d memory unreadable: starting without the gate", r.spec.id, r.spec.device
                )
                return None
            need = needed_bytes(r.budget, mem.total_bytes, opts.gpu_reserve_bytes)
            if mem.covers(need) or self.stopping.is_set():
                log.info(
                    "replica=%s gpu:%d has %s; budget %.3f needs %s GiB: starting",
                    r.spec.id, r.spec.device, mem.describe(), r.budget, gib(need),
                )  # fmt: skip
                return mem
            waited = loop.time() - started
            if waited >= opts.free_memory_deadline_s:
                raise NotEnoughMemory(self.report(r, mem, waited_s=waited, tried=(r.budget,)))
            if not waiting:
                waiting = True
                log.info(
                    "replica=%s waiting for gpu:%d: %s, budget %.3f needs %s GiB (deadline %.0f s)",
                    r.spec.id, r.spec.device, mem.describe(), r.budget, gib(need),
                    opts.free_memory_deadline_s,
                )  # fmt: skip
            await asyncio.sleep(opts.free_memory_poll_s)

    def report(
        self,
        r: Replica,
        free: DeviceMemory | None,
        tried: Sequence[float],
        oom: Oom | None = None,
        waited_s: float | None = None,
    ) -> StartReport:
        return StartReport(
            replica=r.spec.id,
            model=r.spec.model.name,
            device=r.spec.device,
            budgets_tried=tuple(tried),
            floor=r.floor,
            free=free,
            reserve_bytes=self.options.gpu_reserve_bytes,
            oom=oom,
            waited_s=waited_s,
        )

    def give_up(self, r: Replica, report: StartReport) -> bool:
        r.failure = report
        log.error("%s", report.message())
        return False

    async def start_with_retries(self, r: Replica) -> bool:
        """Start ``r``; on a GPU, one start at a time per device, behind the free-memory gate, with the
        out-of-memory back-off.  Returns whether it became ready."""
        if not r.on_gpu:
            return await self._attempts(r)
        lock = self.device_locks.setdefault(r.spec.device, asyncio.Lock())
        async with lock:
            return await self._attempts(r)

    async def _attempts(self, r: Replica) -> bool:
        r.budgets_tried, r.failure = [], None
        attempt = failures = 0
        while failures < self.options.max_start_attempts:
            attempt += 1
            free: DeviceMemory | None = None
            if r.on_gpu:
                try:
                    free = await self.wait_for_memory(r)
                except NotEnoughMemory as exc:
                    return self.give_up(r, exc.report)
            if self.stopping.is_set():
                return False
            try:
                await self.start(r)
                return True
            except StartFailed as exc:
                await r.process.stop(1.0)
                log.error("replica=%s start %d failed: %s\n%s", r.spec.id, attempt, exc, exc.log_tail)
                tail = exc.log_tail
            if self.stopping.is_set():
                return False
            oom = detect_oom(tail) if r.on_gpu else None
            if oom is None:
                failures += 1
                if failures < self.options.max_start_attempts:
                    await asyncio.sleep(self.options.backoff.delay(failures))
                continue
            lower = next_budget(oom, r.budget, r.floor, self.options.oom_step)
            if lower is None:
                return self.give_up(r, self.report(r, free, tried=r.budgets_tried, oom=oom))
            log.warning(
                "replica=%s out of memory (%s) at gpu_memory_utilization %.3f; retrying at %.3f (floor %.3f)",
                r.spec.id, oom.kind.value, r.budget, lower, r.floor,
            )  # fmt: skip
            r.set_budget(lower)
        return False

    async def watch(self, r: Replica) -> None:
        """Restart the replica each time it dies (:meth:`_watch`); an unexpected error is logged and leaves
        the replica FAILED, never a silently dead watch."""
        try:
            await self._watch(r)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("replica=%s watch failed: the replica is left failed", r.spec.id)
            await r.process.stop(1.0)
            await self.set_state(r, ReplicaState.FAILED)

    def ended(self, r: Replica) -> bool:
        return self.stopping.is_set() or r.retired

    async def _watch(self, r: Replica) -> None:
        """Wait for the process to die, then restart it with a back-off that grows over consecutive
        failures (failed starts included) until a start succeeds or ``give_up_after`` is passed."""
        policy = self.options.backoff
        consecutive = 0
        while not self.ended(r):
            await exited(r.process)
            if self.ended(r):
                return
            ran = time.monotonic() - r.started_at
            if ran >= policy.healthy_after_s:
                consecutive = 0
            log.warning("replica=%s died (exit %s) after %.0f s", r.spec.id, r.process.returncode(), ran)
            while True:
                consecutive += 1
                if consecutive > policy.give_up_after:
                    log.error(
                        "replica=%s gave up after %d consecutive failed restarts: left failed",
                        r.spec.id, consecutive - 1,
                    )  # fmt: skip
                    self.metrics.actions.labels("restart", r.spec.model.name, "gave_up").inc()
                    await self.set_state(r, ReplicaState.FAILED)
                    return
                if not await self.restart(r, policy.delay(consecutive)):
                    if self.ended(r):
                        return
                    continue
                break

    async def restart(self, r: Replica, delay: float) -> bool:
        """One restart after ``delay``; True when the replica is ready again."""
        r.restarts += 1
        log.warning("replica=%s restart %d in %.1f s", r.spec.id, r.restarts, delay)
        await self.set_state(r, ReplicaState.STARTING)
        await r.process.stop(1.0)
        await asyncio.sleep(delay)
        if self.ended(r):
            return False
        ok = await self.start_with_retries(r)
        self.metrics.actions.labels("restart", r.spec.model.name, "ok" if ok else "failed").inc()
        return ok

    def begin_watch(self, r: Replica) -> None:
        r.watcher = asyncio.create_task(self.watch(r))
        self.watchers.append(r.watcher)

    async def retire(self, r: Replica) -> None:
        """Take a replica out for good: publish DRAINING, let its work finish, stop it, withdraw it."""
        if r.watcher is not None:
            r.watcher.cancel()
            await asyncio.gather(r.watcher, return_exceptions=True)
            self.watchers.remove(r.watcher)
        if r.process.alive and r.state in ROUTABLE:
            await self.set_state(r, ReplicaState.DRAINING)
            await wait_until_idle(self.client, [r.spec.url], self.options.timing)
        await r.process.stop()
        r.retired = True
        await self.registry.remove(r.record())
        if r in self.replicas:
            self.replicas.remove(r)
        self.on_change(r)

    async def heartbeat(self) -> None:
        interval = self.options.timing.heartbeat_s
        while not self.stopping.is_set():
            await self.publish_all()
            await asyncio.sleep(interval)

    async def publish_all(self) -> int:
        """Publish every live replica's record now; returns how many."""
        live = [
            r
            for r in self.replicas
            if r.state is ReplicaState.ASLEEP or (r.state is not ReplicaState.STARTING and r.process.alive)
        ]
        for r in live:
            await self.registry.publish(r.record())
        return len(live)

    async def follow_redis(self) -> None:
        """Republish every replica at once when Redis comes back as a new server (its run id changed):
        an emptied registry is refilled at once instead of one heartbeat later."""
        known: str | None = None
        while not self.stopping.is_set():
            current = await self.registry.run_id()
            if current is not None and known is not None and current != known:
                n = await self.publish_all()
                self.republished += 1
                self.metrics.republished.inc()
                log.warning("redis restarted (run id %s -> %s): republished %d replicas", known, current, n)
            known = current or known
            await asyncio.sleep(self.options.redis_check_s)

    async def start_group(self, group: Sequence[Replica]) -> None:
        for r in group:
            if self.stopping.is_set():
                return
            if await self.start_with_retries(r):
                self.begin_watch(r)

    async def run(self) -> None:
        """Start the replicas (one after another on each device; devices side by side), then watch them
        until stop() is called."""
        heartbeat = asyncio.create_task(self.heartbeat())
        redis_watch = asyncio.create_task(self.follow_redis())
        idle = [r for r in self.replicas if r.watcher is None and not r.process.alive]  # not adopted ones
        await asyncio.gather(*(self.start_group(g) for g in start_groups(idle)))
        await self.stopping.wait()
        tasks = [heartbeat, redis_watch, *self.watchers]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def drain(self) -> None:
        """Mark every replica draining, let in-flight work finish within the grace period, then stop."""
        self.stopping.set()
        live = [r for r in self.replicas if r.process.alive]
        for r in live:
            await self.set_state(r, ReplicaState.DRAINING)
        log.info("draining %d replicas (grace %.0f s)", len(live), self.options.timing.drain_grace_s)
        await wait_until_idle(self.client, [r.spec.url for r in live], self.options.timing)
        await asyncio.gather(*(r.process.stop() for r in self.replicas))
        for r in self.replicas:
            await self.registry.remove(r.record())
        log.info("all replicas stopped")


def start_groups(replicas: Sequence[Replica]) -> list[list[Replica]]:
    """Replicas that start one after another: those of each GPU, in fleet order; all CPU replicas as one."""
    groups: dict[tuple[str, int], list[Replica]] = {}
    for r in replicas:
        key = ("gpu", r.spec.device) if r.on_gpu else ("cpu", 0)
        groups.setdefault(key, []).append(r)
    return list(groups.values())


async def exited(process: ReplicaProcess) -> None:
    """Return once the replica's process has exited (at once when there is none)."""
    if isinstance(process, AdoptedProcess):
        await process.wait_exit()
    elif process.proc is not None:
        await process.proc.wait()


def port_taken(host: str, port: int) -> bool:
    """True when something already listens on ``host:port`` (a bind with SO_REUSEADDR fails only then)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False
