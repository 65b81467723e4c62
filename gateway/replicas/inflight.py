"""In-flight counts shared between gateway replicas through Redis: what the others have on each replica.

Every ``LLMGW_LOAD_SHARE_INTERVAL_S`` (0.1 s) each gateway runs, per model (one hash per model, under the
model's hash tag: one Redis Cluster slot each, the calls concurrent), one Lua script that writes its own
counts (``{replica id: requests in flight}``) into the model's hash, field = its gateway id, stamped with
Redis's clock,
and returns the other gateways' fields no older than ``max_age_ms`` (older ones, a crashed gateway's, are
deleted on the way). Each endpoint's ``shared_others`` becomes the sum of the others' counts for it, so a
routing decision sees the whole fleet's in-flight requests at most one interval old, where vLLM's scraped
gauges were a second old (see ``Endpoint.load``). Nothing of this is on the request path. When Redis
cannot be reached, ``shared_others`` is cleared and the load falls back to the scraped gauges.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter

import redis.asyncio as aioredis

from gateway.redis_clients import REDIS_DOWN
from gateway.replicas.table import ReplicaTable
from llmgw_contract.redis_keys import RedisKeys

log = logging.getLogger("llmgw.inflight")

SHARE_SCRIPT = """
local now_t = redis.call('TIME')
local now = tonumber(now_t[1]) * 1000 + math.floor(tonumber(now_t[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], now .. ' ' .. ARGV[2])
local others = {}
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local value = fields[i + 1]
  local sp = string.find(value, ' ', 1, true)
  local at = sp and tonumber(string.sub(value, 1, sp - 1))
  if not at or now - at > tonumber(ARGV[3]) then
    redis.call('HDEL', KEYS[1], fields[i])
  elseif fields[i] ~= ARGV[1] then
    others[#others + 1] = string.sub(value, sp + 1)
  end
end
return others
"""


def own_counts(table: ReplicaTable, model: str | None = None) -> dict[str, int]:
    """This gateway's requests in flight per replica id, of ``model`` or of all (none: left out)."""
    endpoints = table.endpoints() if model is None else table.pool(model).endpoints
    return {ep.id: ep.inflight for ep in endpoints if ep.inflight > 0}


def add_counts(blobs: list[bytes]) -> Counter[str]:
    """The other gateways' JSON counts summed per replica id; a malformed entry is skipped."""
    total: Counter[str] = Counter()
    for blob in blobs:
        try:
            counts = json.loads(blob)
            total.update({str(k): int(v) for k, v in counts.items() if int(v) > 0})
        except (ValueError, TypeError, AttributeError):
            continue
    return total


class InflightShare:
    def __init__(
        self, redis: aioredis.Redis, keys: RedisKeys, gateway_id: str, table: ReplicaTable, max_age_s: float
    ) -> None:
        self.redis, self.keys, self.gateway_id, self.table = redis, keys, gateway_id, table
        self.max_age_ms = max(1, int(max_age_s * 1000))
        self.script = redis.register_script(SHARE_SCRIPT)
        self.connected = True

    async def tick(self) -> None:
        """Publish our counts, read the others'; on a Redis failure fall back to the scraped gauges."""
        models = [p.model for p in self.table.pools()]
        try:
            replies = await asyncio.gather(*(self._share(m) for m in models))
        except REDIS_DOWN as exc:
            self.apply(None)
            if self.connected:
                log.warning("in-flight share lost (%s): load falls back to the scraped vLLM gauges", exc)
            self.connected = False
            return
        if not self.connected:
            log.info("in-flight share back")
        self.connected = True
        self.apply(add_counts([blob for blobs in replies for blob in blobs]))

    async def _share(self, model: str) -> list[bytes]:
        own = json.dumps(own_counts(self.table, model), separators=(",", ":"))
        key = self.keys.inflight(model)
        return list(await self.script(keys=[key], args=[self.gateway_id, own, self.max_age_ms]))

    def apply(self, others: Counter[str] | None) -> None:
        for ep in self.table.endpoints():
            ep.shared_others = None if others is None else others.get(ep.id, 0)

    async def leave(self) -> None:
        """Remove this gateway's field on shutdown, so that the others stop counting it at once."""
        try:
            for pool in self.table.pools():
                await self.redis.hdel(self.keys.inflight(pool.model), self.gateway_id)
        except REDIS_DOWN:
            return
