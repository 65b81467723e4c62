"""The supervisor: starts one vLLM process per replica, one after another, registers each ready
replica, restarts crashed ones with back-off, and drains them all on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from gateway.replica import ReplicaRecord, ReplicaState
from workers.launch import Launch, ReplicaSpec
from workers.process import ReplicaProcess, StartFailed, running_requests
from workers.registrar import Registrar

log = logging.getLogger("llmgw.workers")


@dataclass(frozen=True, slots=True)
class RestartBackoff:
    """Delay before the n-th consecutive restart: base × 2^(n-1), capped; reset after a healthy run."""

    base_s: float = 1.0
    max_s: float = 30.0
    healthy_after_s: float = 60.0

    def delay(self, consecutive: int) -> float:
        return min(self.max_s, self.base_s * 2.0 ** max(0, consecutive - 1))

    def consecutive_after(self, consecutive: int, ran_s: float) -> int:
        return 1 if ran_s >= self.healthy_after_s else consecutive + 1


@dataclass(frozen=True, slots=True)
class SupervisorOptions:
    ready_deadline_s: float = 600.0
    drain_grace_s: float = 30.0
    heartbeat_ttl_s: float = 10.0
    backoff: RestartBackoff = RestartBackoff()
    max_start_attempts: int = 3


class Replica:
    """One replica's process and its published state; owned by the supervisor."""

    def __init__(self, spec: ReplicaSpec, launch: Launch, log_dir: Path) -> None:
        self.spec = spec
        self.process = ReplicaProcess(launch, log_dir / f"{spec.id}.log")
        self.state = ReplicaState.STARTING
        self.restarts = 0
        self.started_at = 0.0
        self.startup_s = 0.0

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
        )


class Supervisor:
    def __init__(
        self,
        replicas: list[Replica],
        registrar: Registrar,
        client: httpx.AsyncClient,
        options: SupervisorOptions,
        on_change: Callable[[Replica], None] = lambda r: None,
    ) -> None:
        self.replicas, self.registrar, self.client, self.options = replicas, registrar, client, options
        self.on_change = on_change
        self.stopping = asyncio.Event()

    async def set_state(self, r: Replica, state: ReplicaState) -> None:
        r.state = state
        self.on_change(r)
        if state is ReplicaState.STARTING:
            await self.registrar.remove(r.record())
        else:
            await self.registrar.publish(r.record())

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
        await r.process.start()
        r.startup_s = await r.process.wait_ready(
            r.spec.url, r.spec.model.name, self.options.ready_deadline_s, self.client
        )
        r.started_at = time.monotonic()
        await self.set_state(r, ReplicaState.READY)
        log.info(
            "replica=%s ready in %.1f s pid=%s url=%s", r.spec.id, r.startup_s, r.process.pid, r.spec.url
        )

    async def start_with_retries(self, r: Replica) -> bool:
        for attempt in range(1, self.options.max_start_attempts + 1):
            try:
                await self.start(r)
                return True
            except StartFailed as exc:
                await r.process.stop(1.0)
                log.error("replica=%s start %d failed: %s\n%s", r.spec.id, attempt, exc, exc.log_tail)
            if self.stopping.is_set():
                return False
        return False

    async def watch(self, r: Replica) -> None:
        """Restart the replica each time it dies, with back-off, until the supervisor stops."""
        consecutive = 0
        while not self.stopping.is_set():
            assert r.process.proc is not None
            await r.process.proc.wait()
            if self.stopping.is_set():
                return
            ran = time.monotonic() - r.started_at
            consecutive = self.options.backoff.consecutive_after(consecutive, ran)
            delay = self.options.backoff.delay(consecutive)
            r.restarts += 1
            log.warning(
                "replica=%s died (exit %s) after %.0f s; restart %d in %.1f s",
                r.spec.id,
                r.process.returncode(),
                ran,
                r.restarts,
                delay,
            )
            await self.set_state(r, ReplicaState.STARTING)
            await r.process.stop(1.0)
            await asyncio.sleep(delay)
            if not self.stopping.is_set():
                await self.start_with_retries(r)

    async def heartbeat(self) -> None:
        interval = self.options.heartbeat_ttl_s / 3
        while not self.stopping.is_set():
            for r in self.replicas:
                if r.state is not ReplicaState.STARTING and r.process.alive:
                    await self.registrar.publish(r.record())
            await asyncio.sleep(interval)

    async def run(self) -> None:
        """Start every replica one after another, then watch them until stop() is called."""
        tasks = [asyncio.create_task(self.heartbeat())]
        for r in self.replicas:
            if self.stopping.is_set():
                break
            if await self.start_with_retries(r):
                tasks.append(asyncio.create_task(self.watch(r)))
        await self.stopping.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def drain(self) -> None:
        """Mark every replica draining, let in-flight work finish within the grace period, then stop."""
        self.stopping.set()
        live = [r for r in self.replicas if r.process.alive]
        for r in live:
            await self.set_state(r, ReplicaState.DRAINING)
        log.info("draining %d replicas (grace %.0f s)", len(live), self.options.drain_grace_s)
        deadline = time.monotonic() + self.options.drain_grace_s
        await asyncio.sleep(min(2.0, self.options.drain_grace_s))  # gateways see the draining state
        while time.monotonic() < deadline:
            busy = [r.spec.id for r in live if await running_requests(self.client, r.spec.url)]
            if not busy:
                break
            await asyncio.sleep(0.5)
        await asyncio.gather(*(r.process.stop() for r in self.replicas))
        for r in self.replicas:
            await self.registrar.remove(r.record())
        log.info("all replicas stopped")
