"""LoRA adapters loaded at run time: across a model's replicas through vLLM's runtime LoRA endpoints,
recorded in Redis (:meth:`RedisKeys.lora`, one hash per model: adapter name → JSON) so every gateway
learns the name without a restart, and which replicas loaded it, each as (replica id, instance): an
adapter request goes only to those. A replica that restarted (same id, another instance) lost its
adapters: :meth:`AdapterStore.tick` takes it out of their sets.

Only the admin API (gateway/admin/routes.py) calls vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter;
the request path never forwards them (gateway/endpoints.py)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import httpx
import orjson
import redis.asyncio as aioredis

from gateway.redis_clients import REDIS_DOWN
from gateway.replicas.table import Endpoint, ReplicaTable
from llmgw_contract.fleet import Model
from llmgw_contract.redis_keys import RedisKeys

log = logging.getLogger("llmgw.lora")


Holder = tuple[str, str]
"""(replica id, instance) of a replica that loaded an adapter."""


@dataclass(frozen=True, slots=True)
class RuntimeAdapter:
    """An adapter of ``model`` loaded at run time on the replicas ``holders``."""

    name: str
    model: str
    path: str
    holders: frozenset[Holder] = frozenset()

    @property
    def replicas(self) -> list[str]:
        return sorted(replica for replica, _ in self.holders)

    def holds(self, ep: Endpoint) -> bool:
        return (ep.id, ep.record.instance) in self.holders

    def to_json(self) -> bytes:
        return orjson.dumps({"path": self.path, "replicas": sorted(self.holders)})

    @classmethod
    def from_json(cls, name: str, model: str, raw: bytes | str) -> RuntimeAdapter:
        data = orjson.loads(raw)
        holders = {
            (h, "") if isinstance(h, str) else (str(h[0]), str(h[1])) for h in data.get("replicas", [])
        }
        return cls(name, model, str(data["path"]), frozenset(holders))


def holder_of(ep: Endpoint) -> Holder:
    return ep.id, ep.record.instance


def restarted(adapter: RuntimeAdapter, table: ReplicaTable) -> frozenset[Holder]:
    """The holders whose replica is in the table with another instance (its adapters are gone)."""
    pool = table.find(adapter.model)
    now = {ep.id: ep.record.instance for ep in pool.endpoints} if pool is not None else {}
    return frozenset(h for h in adapter.holders if h[0] in now and now[h[0]] != h[1])


@dataclass(slots=True)
class LoadResult:
    """What each replica said to a load or unload."""

    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class AdapterStore:
    """The runtime adapters in Redis, and this gateway's copy of them (``adapters``, name → adapter)."""

    def __init__(
        self, redis: aioredis.Redis, keys: RedisKeys, models: Iterable[Model], table: ReplicaTable
    ) -> None:
        self.redis, self.keys, self.table = redis, keys, table
        self.models = [m.name for m in models if m.engine.runtime_lora]
        self.adapters: dict[str, RuntimeAdapter] = {}

    async def save(self, adapter: RuntimeAdapter) -> None:
        await self.redis.hset(self.keys.lora(adapter.model), adapter.name, adapter.to_json())
        self.adapters[adapter.name] = adapter

    async def drop(self, adapter: RuntimeAdapter) -> None:
        await self.redis.hdel(self.keys.lora(adapter.model), adapter.name)
        self.adapters.pop(adapter.name, None)

    async def read(self) -> dict[str, RuntimeAdapter]:
        found: dict[str, RuntimeAdapter] = {}
        for model in self.models:
            entries = await self.redis.hgetall(self.keys.lora(model))
            for name, raw in entries.items():
                adapter = RuntimeAdapter.from_json(text(name), model, raw)
                found[adapter.name] = adapter
        return found

    async def tick(self) -> None:
        """Follow what other gateways loaded or unloaded; keep the last copy while Redis is away."""
        if not self.models:
            return
        try:
            fresh = await self.read()
            for name, adapter in list(fresh.items()):
                gone = restarted(adapter, self.table)
                if gone:
                    fresh[name] = dataclasses.replace(adapter, holders=adapter.holders - gone)
                    await self.redis.hset(self.keys.lora(adapter.model), name, fresh[name].to_json())
                    log.warning(
                        "lora adapter=%s left restarted replica(s) %s", name, sorted(r for r, _ in gone)
                    )
        except REDIS_DOWN as exc:
            log.warning("runtime LoRA adapters not refreshed (Redis: %s)", exc)
            return
        if fresh != self.adapters:
            log.info("runtime LoRA adapters: %s", ", ".join(sorted(fresh)) or "none")
        self.adapters.clear()
        self.adapters.update(fresh)


ReplicaHeaders = Callable[[Endpoint], dict[str, str]]
"""Each replica's own Authorization (gateway/upstream/credentials.py)."""


async def call_replicas(
    client: httpx.AsyncClient,
    replicas: Iterable[Endpoint],
    path: str,
    body: dict[str, str],
    headers: ReplicaHeaders,
) -> LoadResult:
    """POST ``body`` to ``path`` on each replica; a 200 counts as done, anything else as failed."""
    result = LoadResult()
    for ep in replicas:
        try:
            r = await client.post(f"{ep.url}{path}", json=body, headers=headers(ep), timeout=120.0)
        except httpx.HTTPError as exc:
            result.failed[ep.id] = f"{type(exc).__name__}: {exc}"
            continue
        if r.status_code == 200:
            result.done.append(ep.id)
        else:
            result.failed[ep.id] = f"{r.status_code}: {r.text[:300]}"
    return result


async def load(
    client: httpx.AsyncClient, replicas: Iterable[Endpoint], name: str, path: str, headers: ReplicaHeaders
) -> LoadResult:
    body = {"lora_name": name, "lora_path": path}
    return await call_replicas(client, replicas, "/v1/load_lora_adapter", body, headers)


async def unload(
    client: httpx.AsyncClient, replicas: Iterable[Endpoint], name: str, headers: ReplicaHeaders
) -> LoadResult:
    return await call_replicas(client, replicas, "/v1/unload_lora_adapter", {"lora_name": name}, headers)
