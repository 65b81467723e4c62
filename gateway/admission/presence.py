"""Gateway replica presence: each gateway keeps a key with a TTL, so every gateway knows how many there are.

While Redis is unreachable, a gateway admits ``1 / replicas`` of each model's capacity locally, using the
count it saw last, so that the replicas together stay near the model's capacity.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from contract.redis_keys import RedisKeys


class Presence:
    def __init__(self, redis: aioredis.Redis, keys: RedisKeys, gateway_id: str, ttl_s: float) -> None:
        self.redis, self.keys, self.gateway_id, self.ttl_s = redis, keys, gateway_id, ttl_s
        self.replicas = 1

    @property
    def share(self) -> float:
        return 1.0 / max(1, self.replicas)

    async def beat(self) -> int:
        """Refresh this gateway's key and count the gateways alive (this one included)."""
        await self.redis.set(self.keys.gateway(self.gateway_id), b"1", px=int(self.ttl_s * 1000))
        names = {k async for k in self.redis.scan_iter(match=self.keys.gateway_pattern(), count=1000)}
        self.replicas = max(1, len(names))
        return self.replicas

    async def leave(self) -> None:
        await self.redis.delete(self.keys.gateway(self.gateway_id))
