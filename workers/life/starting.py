"""Starting one replica: the process, its readiness, and on a GPU the free-memory gate and the
out-of-memory back-off.

Replicas that share a GPU start strictly one at a time (a lock per device, which restarts take too; vLLM
mis-sizes the KV cache of processes that start together on one device), each only when the previous is
ready and the free memory of *each of its devices* covers ``budget x total + reserve`` (polled through a
:data:`~workers.host.gpu.MemoryProbe` until a deadline). A tensor-parallel replica takes the locks of all
its devices (in index order) and waits for all of them; a replica never waits for a device it does not
run on (one on GPU 1 never waits for GPU 0's memory). A start that fails with out-of-memory is retried
with the budget lowered by 0.05 down to the replica's floor; past it, the replica stays stopped and one
log line (:class:`~workers.replica.oom.StartReport`) names the model, the budget, the free memory and what
to change. On CPUs none of this applies: failed starts are retried as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import httpx

from llmgw_contract.registry import ReplicaState
from workers.host.gpu import DeviceMemory, MemoryProbe, gib
from workers.host.ports import port_taken
from workers.life.process import StartFailed
from workers.life.replica import Replica, SupervisorOptions
from workers.replica.oom import Oom, StartReport, detect_oom, needed_bytes, next_budget

log = logging.getLogger("llmgw.workers")


class Move(Protocol):
    """The owner's one state change (``Supervisor.move``)."""

    def __call__(self, r: Replica, state: ReplicaState, why: str = "") -> Awaitable[None]: ...


class NotEnoughMemory(Exception):
    def __init__(self, report: StartReport) -> None:
        super().__init__(report.message())
        self.report = report


class Starter:
    """Starts replicas for their owner, which passes its one state-changing method (``move``) and the
    one place an instance id is given (``launched``)."""

    def __init__(
        self,
        options: SupervisorOptions,
        client: httpx.AsyncClient,
        probe: MemoryProbe,
        move: Move,
        launched: Callable[[Replica], None],
        stopping: asyncio.Event,
    ) -> None:
        self.options, self.client, self.probe, self.move = options, client, probe, move
        self.launched, self.stopping = launched, stopping
        self.device_locks: dict[int, asyncio.Lock] = {}

    async def start_once(self, r: Replica) -> None:
        """Start a replica and wait until /health answers and /v1/models lists it."""
        await self.move(r, ReplicaState.STARTING)
        log.info(
            "replica=%s starting on %s:%d (%s)",
            r.spec.id,
            r.spec.device_kind,
            r.spec.device,
            r.spec.budget_label,
        )
        if r.on_gpu:
            r.budgets_tried.append(r.budget)
        self.launched(r)
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
        await self.move(r, ReplicaState.READY)
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
            used, free, total = mem.used_bytes >> 20, mem.free_bytes >> 20, mem.total_bytes >> 20
            log.info(
                "replica=%s gpu:%d %s: used_mib=%d free_mib=%d total_mib=%d",
                r.spec.id, r.spec.device, when, used, free, total,
            )  # fmt: skip

    async def short_device(self, r: Replica) -> tuple[DeviceMemory | None, bool]:
        """Read each of the replica's devices: (the first whose free memory does not cover the budget plus
        the reserve, False), else (the last reading, True). An unreadable device opens the gate:
        (None, True)."""
        mem: DeviceMemory | None = None
        for device in r.spec.devices:
            mem = await self.read_device(device)
            if mem is None:
                log.warning(
                    "replica=%s gpu:%d memory unreadable: starting without the gate", r.spec.id, device
                )
                return None, True
            if not mem.covers(needed_bytes(r.budget, mem.total_bytes, self.options.gpu_reserve_bytes)):
                return mem, False
        return mem, True

    async def wait_for_memory(self, r: Replica) -> DeviceMemory | None:
        """Poll the replica's devices until the free memory of each covers its budget plus the reserve.

        Returns the last reading (None where a device cannot be read: the gate is then open);
        raises :class:`NotEnoughMemory` at the deadline, naming the device that lacked memory.
        """
        opts = self.options
        loop = asyncio.get_running_loop()
        started = loop.time()
        waiting = False
        while True:
            mem, covered = await self.short_device(r)
            if mem is None:
                return None
            need = needed_bytes(r.budget, mem.total_bytes, opts.gpu_reserve_bytes)
            if covered or self.stopping.is_set():
                log.info(
                    "replica=%s gpu:%s has %s; budget %.3f needs %s GiB: starting",
                    r.spec.id, r.spec.device_list, mem.describe(), r.budget, gib(need),
                )  # fmt: skip
                return mem
            waited = loop.time() - started
            if waited >= opts.free_memory_deadline_s:
                raise NotEnoughMemory(self.report(r, mem, waited_s=waited, tried=(r.budget,)))
            if not waiting:
                waiting = True
                log.info(
                    "replica=%s waiting for gpu:%d: %s, budget %.3f needs %s GiB (deadline %.0f s)",
                    r.spec.id, mem.index, mem.describe(), r.budget, gib(need),
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
            device=free.index if free is not None else r.spec.device,
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

    async def start(self, r: Replica) -> bool:
        """Start ``r``; on a GPU, one start at a time per device, behind the free-memory gate, with the
        out-of-memory back-off; a replica on several devices holds every one's lock, taken in index order
        (so two tensor-parallel replicas never each wait for the other).  Returns whether it became ready."""
        if not r.on_gpu:
            return await self.attempts(r)
        async with contextlib.AsyncExitStack() as held:
            for device in sorted(set(r.spec.devices)):
                await held.enter_async_context(self.device_locks.setdefault(device, asyncio.Lock()))
            return await self.attempts(r)

    async def attempts(self, r: Replica) -> bool:
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
            if self.stopping.is_set() or r.retired:
                return False
            tail = await self.one_attempt(r, attempt)
            if tail is None:
                return True
            if self.stopping.is_set() or r.retired:
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

    async def one_attempt(self, r: Replica, attempt: int) -> str | None:
        """One start; None when it became ready, else the end of its log. An error of the spawn itself
        (no launcher binary, a pids limit, an unwritable log: an OSError) is a failed attempt too, logged
        with its traceback."""
        try:
            await self.start_once(r)
            return None
        except StartFailed as exc:
            log.error("replica=%s start %d failed: %s\n%s", r.spec.id, attempt, exc, exc.log_tail)
            tail = exc.log_tail
        except OSError:
            log.exception("replica=%s start %d failed: the process could not be spawned", r.spec.id, attempt)
            tail = ""
        await r.process.stop(1.0)
        return tail
