"""Follows the replica registry in Redis (and the fleet's external endpoints) into the ReplicaTable;
what belonged to a replica that left goes with it: its metric series here, and through the
:class:`Departures` hooks the app wires (the upstream connections of URLs no replica has, the shared
prefix index's entries of replicas that left a model).

When Redis comes back as a new server (its ``run_id`` changed: restarted or replaced, and so empty),
a model whose registry reads empty keeps its last known replicas for up to ``hold_s`` (one registry TTL),
until the supervisor and sidecars republish, instead of dropping every model at once.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import redis.asyncio as aioredis

from gateway.metrics import GatewayMetrics
from gateway.redis_clients import REDIS_DOWN
from gateway.replicas.table import MODEL_STATES, ReplicaTable
from llmgw_contract.fleet import Fleet
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryTiming, ReplicaRecord, read_registry, redis_run_id

log = logging.getLogger("llmgw.discovery")


def external_records(fleet: Fleet) -> dict[str, list[ReplicaRecord]]:
    """Replicas the fleet lists by URL: routed and health-checked, never supervised."""
    return {
        m.name: [
            ReplicaRecord(
                id=f"{m.name}-ext{i}", model=m.name, url=e.url.rstrip("/"), concurrency=m.concurrency
            )
            for i, e in enumerate(m.endpoints)
        ]
        for m in fleet.models
        if not m.managed
    }


async def nothing_indexed(model: str, present: list[str]) -> list[str]:
    """The departed hook without a shared prefix index: nothing to forget."""
    return []


@dataclass(frozen=True, slots=True)
class Departures:
    """What the app does when replicas leave: ``retain`` gets the URLs still listed (the upstream pool
    closes the others' connections); ``forget`` gets a changed model and its present replica ids and
    returns the ids it dropped (the shared prefix index)."""

    retain: Callable[[Iterable[str]], object]
    forget: Callable[[str, list[str]], Awaitable[list[str]]] = nothing_indexed


class Discovery:
    """One task: every poll interval, the registry's records replace each managed model's pool."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: RedisKeys,
        fleet: Fleet,
        table: ReplicaTable,
        metrics: GatewayMetrics,
        departures: Departures,
        hold_s: float = RegistryTiming().ttl_s,
    ) -> None:
        self.redis, self.keys, self.fleet, self.table, self.metrics = redis, keys, fleet, table, metrics
        self.departures = departures
        self.redis_ok = False
        self._external = external_records(fleet)
        self.hold_s = hold_s
        self.run_id: str | None = None
        self.hold_until = 0.0

    def set_fleet(self, fleet: Fleet) -> None:
        """Follow a reloaded fleet file (the table's pools are changed by the same reload)."""
        self.fleet, self._external = fleet, external_records(fleet)

    @property
    def holding(self) -> bool:
        return time.monotonic() < self.hold_until

    def note_run_id(self, run_id: str | None) -> None:
        """Start holding the last known replicas when Redis's run id changed."""
        if run_id is not None and self.run_id is not None and run_id != self.run_id:
            self.hold_until = time.monotonic() + self.hold_s
            log.warning(
                "redis restarted (run id %s -> %s): keeping the last known replicas of models the registry "
                "lacks for up to %.0f s",
                self.run_id, run_id, self.hold_s,
            )  # fmt: skip
        self.run_id = run_id or self.run_id

    def apply(self, records: list[ReplicaRecord]) -> dict[str, list[str]]:
        """Sync every model's pool; returns the models that changed, each with its replica ids."""
        by_model: dict[str, list[ReplicaRecord]] = defaultdict(list)
        for rec in records:
            by_model[rec.model].append(rec)
        changed: dict[str, list[str]] = {}
        holding = self.holding
        for m in self.fleet.models:
            wanted = self._external[m.name] if not m.managed else by_model.get(m.name, [])
            if m.managed and holding and not wanted and self.table.pool(m.name).endpoints:
                continue  # an emptied registry after a Redis restart: keep serving what was known
            self.metrics.set_kv_index(m.name, [r.kv_index for r in wanted if r.routable])
            if self._sync(m.name, wanted):
                states = ", ".join(f"{r.id}={r.state.value}" for r in wanted) or "none"
                log.info("model=%s replicas changed: %s", m.name, states)
                changed[m.name] = [r.id for r in wanted]
        self.departures.retain(e.url for e in self.table.endpoints())
        return changed

    def _sync(self, model: str, wanted: list[ReplicaRecord]) -> bool:
        """Replace the model's replicas; the metric series of those that left are dropped."""
        before = {e.id for e in self.table.pool(model).endpoints}
        changed = self.table.sync(model, wanted)
        for gone in before - {r.id for r in wanted}:
            self.metrics.forget_replica(model, gone)
        return changed

    async def forget_departed(self, changed: dict[str, list[str]]) -> None:
        """Drop from the shared prefix index the replicas that left a model's registry."""
        for model, present in changed.items():
            gone = await self.departures.forget(model, present)
            if gone:
                log.info("model=%s prefix index dropped departed replicas: %s", model, ",".join(gone))

    async def refresh(self) -> None:
        try:
            records = await read_registry(self.redis, self.keys)
        except REDIS_DOWN as exc:
            if self.redis_ok:
                log.warning("registry unreachable, keeping the last known replicas: %s", exc)
            self.redis_ok = False
            self.apply_external_only()
            return
        self.redis_ok = True
        self.note_run_id(await redis_run_id(self.redis))
        await self.forget_departed(self.apply(records))

    def apply_external_only(self) -> None:
        for name, recs in self._external.items():
            self._sync(name, recs)
        self.departures.retain(e.url for e in self.table.endpoints())

    async def tick(self) -> None:
        await self.refresh()
        for pool in self.table.pools():
            self.metrics.ready_replicas.labels(pool.model).set(pool.ready_count)
            self.metrics.wake_timeouts.labels(pool.model)  # at zero until a wake times out: alerts see it
            state = pool.state
            for s in MODEL_STATES:
                self.metrics.model_state.labels(pool.model, s).set(1 if s == state else 0)
