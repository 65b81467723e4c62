"""The replica registry: the one contract between whoever runs a vLLM server and every gateway.

A replica is a JSON :class:`ReplicaRecord` in its model's registry hash (``RedisKeys.registry(model)``,
field = replica id) with an expiry stamp (:class:`RegistryTiming`'s TTL, on Redis' clock), so a dead
publisher's replicas vanish by themselves; the models with a registry are stamped in the small
``RedisKeys.models`` set. A read costs O(models + replicas), whatever else Redis holds (no keyspace scan),
and each script touches one key (one Redis Cluster slot). The supervisor and the registration sidecar write
through :func:`publish` and :func:`remove`; gateways read with :func:`read_registry`. Nothing else touches
those keys.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import REDIS_DOWN, follow_master
from llmgw_contract.stamps import decoded, run, stamp

log = logging.getLogger("llmgw.registry")


class ReplicaState(StrEnum):
    """Where a replica is in its life. Only READY takes new requests."""

    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    REPLACING = "replacing"
    """Still serving while its replacement starts; routable until the replacement is ready."""
    ASLEEP = "asleep"
    WAKING = "waking"
    FAILED = "failed"


ROUTABLE = frozenset({ReplicaState.READY, ReplicaState.REPLACING})


def new_instance_id() -> str:
    """A fresh id for one start of one replica: a restarted replica is told apart from the one before."""
    return os.urandom(6).hex()


class ReplicaRecord(BaseModel):
    """One vLLM server of one model, as stored in the Redis registry (JSON, with a TTL)."""

    model_config = ConfigDict(frozen=True)

    id: str
    model: str
    url: str
    state: ReplicaState = ReplicaState.READY
    concurrency: int = 8
    served_name: str | None = None
    device: str = ""
    budget: str = ""
    instance: str = Field(default="", description="changes on every start of the replica")
    detail: str = Field(default="", description="why a failed replica failed (empty otherwise)")
    kv_index: str = Field(
        default="approximate",
        description="exact: its managing agent feeds the prefix index from its KV events; else approximate",
    )

    @property
    def routable(self) -> bool:
        return self.state in ROUTABLE

    @property
    def upstream_model(self) -> str:
        """The model name the replica itself answers to."""
        return self.served_name or self.model


@dataclass(frozen=True, slots=True)
class RegistryTiming:
    """The registry's clock rules, written once: how long a record lives, how often it is refreshed,
    how long a draining replica waits before it reads its in-flight work (every gateway polls the
    registry every second, so two seconds let all of them see DRAINING), and the drain's grace."""

    ttl_s: float = 10.0
    drain_settle_s: float = 2.0
    drain_grace_s: float = 30.0
    drain_poll_s: float = 0.5

    @property
    def heartbeat_s(self) -> float:
        """Three heartbeats per TTL: one lost write never drops a replica."""
        return self.ttl_s / 3


async def publish(redis: aioredis.Redis, keys: RedisKeys, record: ReplicaRecord, ttl_s: float) -> bool:
    """Write (or refresh) a record; False when Redis is unreachable (the next heartbeat retries)."""
    ttl_ms = int(ttl_s * 1000)
    try:
        await run(
            redis,
            "registry_publish",
            [keys.registry(record.model)],
            [record.id, record.model_dump_json(), ttl_ms],
        )
        await stamp(redis, keys.models, record.model, ttl_ms)
    except REDIS_DOWN as exc:
        log.warning("replica=%s registry write failed: %s", record.id, exc)
        return False
    return True


async def remove(redis: aioredis.Redis, keys: RedisKeys, record: ReplicaRecord) -> None:
    """Withdraw a record; a Redis failure is logged (the TTL removes it anyway)."""
    try:
        await redis.hdel(keys.registry(record.model), record.id)
    except REDIS_DOWN as exc:
        log.warning("replica=%s registry delete failed: %s", record.id, exc)


def parse_records(raw: Iterable[bytes | str | None]) -> list[ReplicaRecord]:
    """Records from raw registry values; what is not a record is skipped with a warning."""
    out = []
    for item in raw:
        if item is None:
            continue
        try:
            out.append(ReplicaRecord.model_validate_json(item))
        except ValidationError:
            log.warning("registry entry ignored: not a replica record")
    return out


async def read_model(redis: aioredis.Redis, keys: RedisKeys, model: str) -> dict[str, tuple[bytes, int]]:
    """One model's live entries: replica id -> (record JSON, milliseconds left)."""
    flat = await run(redis, "registry_read", [keys.registry(model)], [])
    return {decoded(flat[i]): (flat[i + 1], int(flat[i + 2])) for i in range(0, len(flat), 3)}


async def read_registry(redis: aioredis.Redis, keys: RedisKeys) -> list[ReplicaRecord]:
    """Every record in the registry; raises one of ``REDIS_DOWN`` when Redis is unreachable."""
    raw: list[bytes] = []
    for model in await stamp(redis, keys.models, "", 0):
        raw += [record for record, _ in (await read_model(redis, keys, model)).values()]
    return parse_records(raw)


async def redis_run_id(redis: aioredis.Redis) -> str | None:
    """The Redis server's ``run_id`` (INFO server): a new one means a new, possibly empty, server. On
    Sentinel, of the master the Sentinels name now (:func:`follow_master`: a failover is followed at
    once, not when the old master is demoted). None when Redis is unreachable."""
    await follow_master(redis)
    try:
        info = await redis.info("server")
    except REDIS_DOWN:
        return None
    run_id = info.get("run_id")
    return str(run_id) if run_id else None


class RegistryWriter:
    """:func:`publish` and :func:`remove` bound to one Redis, key prefix and timing."""

    def __init__(self, redis: aioredis.Redis, keys: RedisKeys, timing: RegistryTiming) -> None:
        self.redis, self.keys, self.timing = redis, keys, timing

    async def publish(self, record: ReplicaRecord) -> bool:
        return await publish(self.redis, self.keys, record, self.timing.ttl_s)

    async def remove(self, record: ReplicaRecord) -> None:
        await remove(self.redis, self.keys, record)

    async def run_id(self) -> str | None:
        return await redis_run_id(self.redis)

    async def follow_master(self) -> bool:
        """On Sentinel, write to the master the Sentinels name now (:func:`follow_master`)."""
        return await follow_master(self.redis)

    async def announce(self, model: str) -> bool:
        """Tell every gateway that a replica of ``model`` changed state (ready, draining), so none waits
        for its next registry poll; False when Redis is unreachable (the poll then tells them)."""
        try:
            await self.redis.publish(self.keys.state_channel, model)
        except REDIS_DOWN as exc:
            log.warning("model=%s state notice not sent: %s", model, exc)
            return False
        return True
