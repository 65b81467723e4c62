"""Gateway replica presence: each gateway process stamps itself (its instance, ``<gateway id>/<boot nonce>``,
so that a gateway restarted under its id is not counted twice once its predecessor's stamp lapsed) in one
small set with an expiry (no keyspace scan), so every gateway knows how many there are.

While Redis is unreachable, a gateway admits ``1 / replicas`` of each model's capacity locally, using the
count it saw last, so that the replicas together stay near the model's capacity.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.stamps import stamp


class Presence:
    def __init__(self, redis: aioredis.Redis, keys: RedisKeys, instance: str, ttl_s: float) -> None:
        self.redis, self.keys, self.instance, self.ttl_s = redis, keys, instance, ttl_s
        self.replicas = 1

    @property
    def share(self) -> float:
        return 1.0 / max(1, self.replicas)

    async def beat(self) -> int:
        """Refresh this gateway's stamp and count the gateways alive (this one included): O(gateways)."""
        alive = await stamp(self.redis, self.keys.gateways, self.instance, int(self.ttl_s * 1000))
        self.replicas = max(1, len(alive))
        return self.replicas

    async def leave(self) -> None:
        await self.redis.zrem(self.keys.gateways, self.instance)
