"""Keeping the registry filled: every live replica republished each heartbeat (its record has a TTL),
and all of them at once when Redis comes back as a new server (its run id changed)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from contract.registry import RegistryWriter, ReplicaState
from contract.replica_metrics import SupervisorMetrics
from workers.life.replica import Replica, SupervisorOptions

log = logging.getLogger("llmgw.workers")


class Publisher:
    """The heartbeat and the Redis-restart watch of one owner's replicas."""

    def __init__(
        self,
        replicas: Callable[[], Sequence[Replica]],
        registry: RegistryWriter,
        options: SupervisorOptions,
        metrics: SupervisorMetrics,
        stopping: asyncio.Event,
    ) -> None:
        self.replicas, self.registry, self.options, self.metrics = replicas, registry, options, metrics
        self.stopping = stopping
        """The loops end once it is set, even if a Redis call swallowed their cancellation."""
        self.republished = 0

    async def heartbeat(self) -> None:
        while not self.stopping.is_set():
            await self.publish_all()
            await asyncio.sleep(self.options.timing.heartbeat_s)

    async def publish_all(self) -> int:
        """Publish every live, asleep or failed replica's record now (a failed one stays published so that
        the gateways answer at once with its failure); returns how many."""
        kept = (ReplicaState.ASLEEP, ReplicaState.FAILED)
        live = [
            r
            for r in self.replicas()
            if r.state in kept or (r.state is not ReplicaState.STARTING and r.process.alive)
        ]
        for r in live:
            await self.registry.publish(r.record())
        return len(live)

    async def follow_redis(self) -> None:
        """Republish every replica at once when Redis comes back as a new server: an emptied registry is
        refilled at once instead of one heartbeat later."""
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
