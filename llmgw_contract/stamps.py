"""The registry's and presence's Redis scripts: structures read in O(their members), never a keyspace scan.

A per-model registry hash holds ``replica id -> "<expiry ms> <record JSON>"``; small stamp sets (ZSETs,
member -> expiry ms) list the models that have a registry and the gateways present. Expiry is on Redis'
clock. Each script touches one key, so each runs in one Redis Cluster slot.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import redis.asyncio as aioredis


def script_source(name: str) -> str:
    lua = resources.files("llmgw_contract") / "lua"
    return (lua / "common.lua").read_text() + "\n" + (lua / f"{name}.lua").read_text()


def decoded(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def run(redis: aioredis.Redis, name: str, keys: list[str], args: list[Any]) -> Any:
    """Run script ``name`` (EVALSHA, loaded on NOSCRIPT by redis-py)."""
    return await redis.register_script(script_source(name))(keys=keys, args=args)


async def stamp(redis: aioredis.Redis, key: str, member: str, ttl_ms: int) -> list[str]:
    """Stamp ``member`` present for ``ttl_ms`` (``member=""``: only read); the live members."""
    return [decoded(m) for m in await run(redis, "stamp", [key], [member, ttl_ms])]
