"""LoRA adapters loaded at run time: across a model's replicas through vLLM's runtime LoRA endpoints,
recorded in Redis (:meth:`RedisKeys.lora`, one hash per model: adapter name → JSON) so every gateway
learns the name without a restart, and which replicas loaded it, so routing prefers those.

Only the admin API (gateway/admin/routes.py) calls vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter;
the request path never forwards them (gateway/endpoints.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx
import orjson
import redis.asyncio as aioredis

from contract.fleet import Model
from contract.redis_keys import RedisKeys
from gateway.redis_clients import REDIS_DOWN
from gateway.replicas.table import Endpoint

log = logging.getLogger("llmgw.lora")


@dataclass(frozen=True, slots=True)
class RuntimeAdapter:
    """An adapter of ``model`` loaded at run time on the replicas ``replicas`` (their ids)."""

    name: str
    model: str
    path: str
    replicas: frozenset[str] = frozenset()

    def to_json(self) -> bytes:
        return orjson.dumps({"path": self.path, "replicas": sorted(self.replicas)})

    @classmethod
    def from_json(cls, name: str, model: str, raw: bytes | str) -> RuntimeAdapter:
        data = orjson.loads(raw)
        return cls(name, model, str(data["path"]), frozenset(data.get("replicas", [])))


@dataclass(slots=True)
class LoadResult:
    """What each replica said to a load or unload."""

    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class AdapterStore:
    """The runtime adapters in Redis, and this gateway's copy of them (``adapters``, name → adapter)."""

    def __init__(self, redis: aioredis.Redis, keys: RedisKeys, models: Iterable[Model]) -> None:
        self.redis, self.keys = redis, keys
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
        except REDIS_DOWN as exc:
            log.warning("runtime LoRA adapters not refreshed (Redis: %s)", exc)
            return
        if fresh != self.adapters:
            log.info("runtime LoRA adapters: %s", ", ".join(sorted(fresh)) or "none")
        self.adapters.clear()
        self.adapters.update(fresh)


async def call_replicas(
    client: httpx.AsyncClient, replicas: Iterable[Endpoint], path: str, body: dict[str, str]
) -> LoadResult:
    """POST ``body`` to ``path`` on each replica; a 200 counts as done, anything else as failed."""
    result = LoadResult()
    for ep in replicas:
        try:
            r = await client.post(f"{ep.url}{path}", json=body, timeout=120.0)
        except httpx.HTTPError as exc:
            result.failed[ep.id] = f"{type(exc).__name__}: {exc}"
            continue
        if r.status_code == 200:
            result.done.append(ep.id)
        else:
            result.failed[ep.id] = f"{r.status_code}: {r.text[:300]}"
    return result


async def load(client: httpx.AsyncClient, replicas: Iterable[Endpoint], name: str, path: str) -> LoadResult:
    return await call_replicas(
        client, replicas, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}
    )


async def unload(client: httpx.AsyncClient, replicas: Iterable[Endpoint], name: str) -> LoadResult:
    return await call_replicas(client, replicas, "/v1/unload_lora_adapter", {"lora_name": name})
