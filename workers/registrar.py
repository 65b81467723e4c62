"""Publishes replicas into the Redis registry with a heartbeat TTL."""

from __future__ import annotations

import logging

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.keys import Keys
from gateway.replica import ReplicaRecord

log = logging.getLogger("llmgw.workers")


class Registrar:
    def __init__(self, redis: aioredis.Redis, keys: Keys, ttl_s: float) -> None:
        self.redis, self.keys, self.ttl_ms = redis, keys, int(ttl_s * 1000)

    async def publish(self, record: ReplicaRecord) -> bool:
        """Write (or refresh) a record; False when Redis is unreachable (the next heartbeat retries)."""
        try:
            await self.redis.set(
                self.keys.replica(record.model, record.id), record.model_dump_json(), px=self.ttl_ms
            )
        except (RedisError, OSError) as exc:
            log.warning("replica=%s registry write failed: %s", record.id, exc)
            return False
        return True

    async def remove(self, record: ReplicaRecord) -> None:
        try:
            await self.redis.delete(self.keys.replica(record.model, record.id))
        except (RedisError, OSError) as exc:
            log.warning("replica=%s registry delete failed: %s", record.id, exc)
