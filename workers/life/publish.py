"""Keeping the registry filled: every live replica republished each heartbeat (its record has a TTL),
and all of them at once when Redis comes back as a new server (its run id changed).

Both loops are :func:`llmgw_contract.supervision.every` loops: a Redis outage (any topology's errors,
``llmgw_contract.redis_url.REDIS_DOWN``) is a failed write, logged, and the next beat writes again; anything
else a step raises is logged with its traceback, counted (``llmgw_supervisor_actions_total{outcome=
"failed"}``) and the loop goes on, so the registry is whole again one heartbeat after Redis answers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from llmgw_contract.registry import RegistryWriter, ReplicaState
from llmgw_contract.replica_metrics import SupervisorMetrics
from llmgw_contract.supervision import every
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
        self._run_id: str | None = None
        """The Redis server's run id as last read (None before it answered once)."""

    async def heartbeat(self) -> None:
        """Every replica published each heartbeat, until the owner stops (a supervised loop)."""
        beat_s, failed = self.options.timing.heartbeat_s, self.metrics.failed
        await every("registry_heartbeat", beat_s, self.beat, self.stopping, failed)

    async def beat(self) -> None:
        await self.publish_all()

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
        refilled at once instead of one heartbeat later (a supervised loop)."""
        check_s, failed = self.options.redis_check_s, self.metrics.failed
        await every("registry_redis_watch", check_s, self.check_redis, self.stopping, failed)

    async def check_redis(self) -> None:
        known, current = self._run_id, await self.registry.run_id()
        if current is not None and known is not None and current != known:
            n = await self.publish_all()
            self.republished += 1
            self.metrics.republished.inc()
            log.warning("redis restarted (run id %s -> %s): republished %d replicas", known, current, n)
        self._run_id = current or known
