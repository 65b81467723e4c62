"""API keys in Redis, stored by the sha256 of their secret (the secret itself is never stored).

A secret reads ``llmgw-<key id>-<random>``: the key id is public (it names the key in listings, logs and
rate-limit counters); only the random part makes it secret. Records live at ``RedisKeys.api_key(hash)`` as
JSON; ``RedisKeys.api_key_index()`` maps each key id to its hash, for listing and revoking. Both names share
one hash tag, so the MULTI that writes a record and its index entry runs on a Redis Cluster too. Every
write and revoke is then announced on ``RedisKeys.api_key_changes``, where the gateways' key caches listen.
"""

from __future__ import annotations

import builtins
import hashlib
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson
import redis.asyncio as aioredis

from llmgw_contract.redis_keys import RedisKeys

SECRET_PREFIX = "llmgw-"


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> tuple[str, str]:
    """(key id, secret)."""
    key_id = secrets.token_hex(6)
    return key_id, f"{SECRET_PREFIX}{key_id}-{secrets.token_urlsafe(32)}"


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One key's tenant, rights and limits (0 means unlimited for rpm/tpm)."""

    key_id: str
    tenant: str
    models: tuple[str, ...] | None = None
    priority: int = 0
    max_priority: int = 0
    rpm: int = 0
    tpm: int = 0
    max_wait_s: float | None = None
    name: str = ""
    created: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if not self.tenant:
            raise ValueError("a key needs a tenant")
        if min(self.priority, self.max_priority, self.rpm, self.tpm) < 0:
            raise ValueError("priority, max_priority, rpm and tpm must not be negative")
        if self.max_wait_s is not None and self.max_wait_s <= 0:
            raise ValueError("max_wait_s must be positive")
        if self.max_priority < self.priority:
            object.__setattr__(self, "max_priority", self.priority)

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes | str) -> ApiKey:
        data: dict[str, Any] = orjson.loads(raw)
        models = data.get("models")
        data["models"] = tuple(models) if models is not None else None
        return cls(**data)


@dataclass(frozen=True, slots=True)
class StoredKey:
    """A key as the store holds it: the sha256 of its secret and its record (an export line)."""

    digest: str
    key: ApiKey

    def to_line(self) -> bytes:
        return orjson.dumps({"hash": self.digest, "key": asdict(self.key)})

    @classmethod
    def from_line(cls, line: bytes | str) -> StoredKey:
        data: dict[str, Any] = orjson.loads(line)
        digest = data.get("hash")
        if not isinstance(digest, str) or len(digest) != 64 or not all(c in HEX for c in digest):
            raise ValueError("an exported key needs 'hash', the 64 hex digits of its secret's sha256")
        return cls(digest, ApiKey.from_json(orjson.dumps(data.get("key"))))


HEX = frozenset("0123456789abcdef")


class KeyStore:
    def __init__(self, redis: aioredis.Redis, keys: RedisKeys) -> None:
        self.redis, self.keys = redis, keys

    async def create(self, key: ApiKey, secret: str) -> None:
        await self.put(StoredKey(hash_secret(secret), key))

    async def put(self, stored: StoredKey) -> None:
        """Write one key record and its index entry at once (create, and import)."""
        digest, key = stored.digest, stored.key
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.api_key(digest), key.to_json())
            pipe.hset(self.keys.api_key_index(), key.key_id, digest)
            await pipe.execute()
        await self.announce(digest)

    async def lookup(self, secret: str) -> ApiKey | None:
        return await self.lookup_digest(hash_secret(secret))

    async def lookup_digest(self, digest: str) -> ApiKey | None:
        raw = await self.redis.get(self.keys.api_key(digest))
        return ApiKey.from_json(raw) if raw is not None else None

    async def list(self) -> list[ApiKey]:
        return [s.key for s in await self.export()]

    async def export(self) -> builtins.list[StoredKey]:
        """Every key with its secret's hash, by tenant then age (what ``llmgw-keys export`` writes)."""
        index = await self.redis.hgetall(self.keys.api_key_index())
        if not index:
            return []
        digests = [text(h) for h in index.values()]
        raws = await self.redis.mget([self.keys.api_key(d) for d in digests])
        found = [
            StoredKey(d, ApiKey.from_json(r)) for d, r in zip(digests, raws, strict=True) if r is not None
        ]
        return sorted(found, key=lambda s: (s.key.tenant, s.key.created))

    async def revoke(self, key_id: str) -> bool:
        digest = await self.redis.hget(self.keys.api_key_index(), key_id)
        if digest is not None:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.delete(self.keys.api_key(text(digest)))
                pipe.hdel(self.keys.api_key_index(), key_id)
                await pipe.execute()
        await self.announce(text(digest) if digest is not None else "")
        return digest is not None

    async def announce(self, digest: str) -> None:
        """Tell every gateway that the key of ``digest`` changed: each drops its cached keys. Also when
        revoking a key not found, so that running a revoke again repairs an announcement that failed
        after the key was deleted."""
        await self.redis.publish(self.keys.api_key_changes, digest)
