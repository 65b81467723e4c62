"""A background step that keeps one gateway's key cache honest: it subscribes to the key store's change
channel (``RedisKeys.api_key_changes``, published by gateway/auth/keys.py on every revoke and import) and
empties the cache on each message. Subscribes on first use and again after a Redis failure; until then
the cache answers nothing (gateway/auth/key_cache.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub

from gateway.auth.key_cache import KeyCache
from gateway.redis_clients import REDIS_DOWN
from llmgw_contract.redis_keys import RedisKeys

log = logging.getLogger("llmgw.auth")


class KeyChanges:
    def __init__(
        self, redis: aioredis.Redis, keys: RedisKeys, cache: KeyCache, listen_s: float = 1.0
    ) -> None:
        self.redis, self.keys, self.cache, self.listen_s = redis, keys, cache, listen_s
        self._pubsub: PubSub | None = None

    async def step(self) -> None:
        """Wait up to ``listen_s`` for one change; subscribe first if not subscribed."""
        try:
            await self._next()
        except REDIS_DOWN as exc:
            log.warning("key change channel interrupted (%s): keys read from the store until back", exc)
            await self.close()
            await asyncio.sleep(self.listen_s)

    async def _next(self) -> None:
        if self._pubsub is None:
            pubsub = self.redis.pubsub()
            self._pubsub = pubsub
            await pubsub.subscribe(self.keys.api_key_changes)
        msg = await self._pubsub.get_message(timeout=self.listen_s)
        kind = msg.get("type") if msg is not None else None
        if kind == "subscribe":  # confirmed by Redis: from here on no change goes unseen
            self.cache.on_subscribed(True)
        elif kind == "message":
            self.cache.changed()

    async def close(self) -> None:
        """Unsubscribe; the cache stops answering until subscribed again."""
        pubsub, self._pubsub = self._pubsub, None
        self.cache.on_subscribed(False)
        if pubsub is not None:
            with contextlib.suppress(*REDIS_DOWN):
                await pubsub.aclose()  # type: ignore[no-untyped-call,unused-ignore]
