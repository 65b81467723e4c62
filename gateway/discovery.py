"""Follows the replica registry in Redis (and the fleet's external endpoints) into the ReplicaTable;
what belonged to a replica that left (its metric series, its upstream connections) goes with it."""

from __future__ import annotations

import logging
from collections import defaultdict

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from contract.fleet import Fleet
from contract.redis_keys import RedisKeys
from contract.registry import ReplicaRecord, read_registry
from gateway.http1 import ConnectionPool
from gateway.metrics import GatewayMetrics
from gateway.pool import ReplicaTable
from gateway.routing.shared_index import SharedIndex

log = logging.getLogger("llmgw.discovery")


def external_records(fleet: Fleet) -> dict[str, list[ReplicaRecord]]:
    """Replicas the fleet lists by URL: routed and health-checked, never supervised."""
    return {
        m.name: [
            ReplicaRecord(id=f"{m.name}-ext{i}", model=m.name, url=url.rstrip("/"), concurrency=m.concurrency)
            for i, url in enumerate(m.endpoints)
        ]
        for m in fleet.models
        if not m.managed
    }


class Discovery:
    """One task: every poll interval, the registry's records replace each managed model's pool."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: RedisKeys,
        fleet: Fleet,
        table: ReplicaTable,
        metrics: GatewayMetrics,
        upstream: ConnectionPool,
        index: SharedIndex | None = None,
    ) -> None:
        self.redis, self.keys, self.fleet, self.table, self.metrics = redis, keys, fleet, table, metrics
        self.upstream = upstream
        self.index = index
        self.redis_ok = False
        self._external = external_records(fleet)

    def apply(self, records: list[ReplicaRecord]) -> dict[str, list[str]]:
        """Sync every model's pool; returns the models that changed, each with its replica ids."""
        by_model: dict[str, list[ReplicaRecord]] = defaultdict(list)
        for rec in records:
            by_model[rec.model].append(rec)
        changed: dict[str, list[str]] = {}
        for m in self.fleet.models:
            wanted = self._external[m.name] if not m.managed else by_model.get(m.name, [])
            if self._sync(m.name, wanted):
                states = ", ".join(f"{r.id}={r.state.value}" for r in wanted) or "none"
                log.info("model=%s replicas changed: %s", m.name, states)
                changed[m.name] = [r.id for r in wanted]
        self.upstream.retain(e.url for e in self.table.endpoints())
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
        if self.index is None:
            return
        for model, present in changed.items():
            gone = await self.index.forget_absent(model, present)
            if gone:
                log.info("model=%s prefix index dropped departed replicas: %s", model, ",".join(gone))

    async def refresh(self) -> None:
        try:
            records = await read_registry(self.redis, self.keys)
        except (RedisError, OSError) as exc:
            if self.redis_ok:
                log.warning("registry unreachable, keeping the last known replicas: %s", exc)
            self.redis_ok = False
            self.apply_external_only()
            return
        self.redis_ok = True
        await self.forget_departed(self.apply(records))

    def apply_external_only(self) -> None:
        for name, recs in self._external.items():
            self._sync(name, recs)
        self.upstream.retain(e.url for e in self.table.endpoints())

    async def tick(self) -> None:
        await self.refresh()
        for pool in self.table.pools():
            self.metrics.ready_replicas.labels(pool.model).set(pool.ready_count)
