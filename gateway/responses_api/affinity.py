"""Response affinity: which replica holds each stored Responses-API response, shared by every gateway.

vLLM keeps a stored response in the memory of the replica that made it, so a follow-up
(``previous_response_id``), a GET or a cancel must reach that replica. The gateway that forwarded the
creating request records ``replica id, instance, tenant`` under :meth:`RedisKeys.response` (the model
is the key's hash tag) with a TTL; every gateway reads it. The instance tells a restarted replica (whose
memory, and the response with it, is gone) from the one that made the response; the tenant is the owner
(the tenant of the key that created it): another tenant is told the response does not exist.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import redis.asyncio as aioredis

from llmgw_contract.redis_keys import RedisKeys

RESPONSE_ID = re.compile(rb'"id"\s*:\s*"(resp_[A-Za-z0-9_-]{1,200})"')
Holder = tuple[str, str]
"""(replica id, instance) of the replica that made a stored response."""
ANONYMOUS = "anonymous"  # the owner of a record written before owners were recorded (keys off)


def response_id_in(data: bytes) -> str:
    """The first Responses-API id (``resp_...``) in a body or in the first events of a stream."""
    found = RESPONSE_ID.search(data)
    return found.group(1).decode() if found else ""


def record_of(raw: bytes | str | None) -> tuple[Holder, str] | None:
    """(holder, owner tenant) from a record's ``replica instance tenant``."""
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else raw
    replica, _, rest = text.partition(" ")
    instance, _, owner = rest.partition(" ")
    return (replica, instance), owner or ANONYMOUS


def holder_of(raw: bytes | str | None, tenant: str) -> Holder | None:
    """The holder of a record owned by ``tenant``; None when there is none or another tenant owns it."""
    record = record_of(raw)
    return record[0] if record is not None and record[1] == tenant else None


class ResponseAffinity:
    """Reads and writes the response → replica records."""

    def __init__(self, redis: aioredis.Redis, keys: RedisKeys, ttl_s: float) -> None:
        self.redis, self.keys, self.ttl_ms = redis, keys, int(ttl_s * 1000)

    async def record(self, model: str, response_id: str, holder: Holder, tenant: str) -> None:
        value = f"{holder[0]} {holder[1]} {tenant}"
        await self.redis.set(self.keys.response(model, response_id), value, px=self.ttl_ms)

    async def owned(self, model: str, response_id: str) -> tuple[Holder, str] | None:
        """The holder and the owner tenant of a response, or None without a record."""
        return record_of(await self.redis.get(self.keys.response(model, response_id)))

    async def find(self, models: Sequence[str], response_id: str, tenant: str) -> tuple[str, Holder] | None:
        """The model and holder of ``tenant``'s response known only by its id (a GET or a cancel): one
        key per model, read in one pipeline (one round trip; one per slot on a Redis Cluster)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for m in models:
                pipe.get(self.keys.response(m, response_id))
            found = await pipe.execute()
        for model, raw in zip(models, found, strict=True):
            holder = holder_of(raw, tenant)
            if holder is not None:
                return model, holder
        return None
