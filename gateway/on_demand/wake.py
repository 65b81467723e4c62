"""Models on demand, the gateway's side: ask for one wake, learn at once that the model is awake.

A request for an on-demand model with no ready replica sets the model's wake request in Redis
(``SET NX`` on :meth:`RedisKeys.wake_request`, so however many gateways see demand, one wake is asked
for); the supervisor reads it and starts the replica. The supervisor publishes the model's name on
:attr:`RedisKeys.state_channel` once the woken replica has decoded a token; :class:`ReadyNotices`
re-reads the registry at that moment, so the waiting requests go on without waiting for the next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub

from gateway.errors import ModelUnavailable
from gateway.metrics import GatewayMetrics
from gateway.redis_clients import REDIS_DOWN
from gateway.replicas.table import ModelPool
from llmgw_contract.fleet import Model
from llmgw_contract.redis_keys import RedisKeys

log = logging.getLogger("llmgw.wake")
RECHECK_S = 0.5
"""How often a waiting request looks at its pool besides the ready notice (a lost notice costs this)."""
RETRY_UNREGISTERED_S = 5.0
"""The Retry-After of a model no supervisor lists (a supervisor restarts and lists it within seconds)."""


class Wakes:
    """Wake requests and the wait for a model to be awake, for one gateway."""

    def __init__(
        self, redis: aioredis.Redis, keys: RedisKeys, gateway_id: str, metrics: GatewayMetrics
    ) -> None:
        self.redis, self.keys, self.gateway_id, self.metrics = redis, keys, gateway_id, metrics
        self._changed = asyncio.Event()
        self._asking: dict[str, asyncio.Task[bool]] = {}
        """Per model, this gateway's ask in flight: the requests that look meanwhile wait for it instead
        of each sending one (hundreds wait for a wake, and every one looks again at each registry change)."""

    async def request(self, model: Model, request_id: str) -> bool:
        """Ask for a wake unless one is already asked for; True when this call asked. The request lives
        for the model's ``wake_timeout_s`` (the supervisor deletes it once the model is awake). While this
        gateway's ask for the model is in flight, a call waits for it and answers False."""
        held = self._asking.get(model.name)
        if held is not None:
            await asyncio.shield(held)
            return False
        task = asyncio.ensure_future(self._ask(model, request_id))
        self._asking[model.name] = task
        task.add_done_callback(lambda _: self._asking.pop(model.name, None))
        return await asyncio.shield(task)

    async def _ask(self, model: Model, request_id: str) -> bool:
        key = self.keys.wake_request(model.name)
        try:
            won = await self.redis.set(key, self.gateway_id, nx=True, px=int(model.wake_timeout_s * 1000))
        except REDIS_DOWN as exc:
            log.warning("request_id=%s model=%s wake request failed: %s", request_id, model.name, exc)
            return False
        if won:
            self.metrics.wake_requests.labels(model.name).inc()
            log.info("request_id=%s model=%s asleep: wake requested", request_id, model.name)
        return bool(won)

    def notify(self) -> None:
        """The replica table changed: every waiting request looks at its pool again."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def until_ready(
        self,
        pool: ModelPool,
        timeout_s: float,
        rewake: Model | None = None,
        unregistered_s: float | None = None,
    ) -> bool:
        """Wait until the pool has a ready replica; False when ``timeout_s`` ran out first. With
        ``rewake``, the wake is asked for again at every look (``SET NX``: nothing while one is pending),
        so a wake that failed (the supervisor drops its request) is tried again while requests wait.
        With ``unregistered_s``: ModelUnavailable once the registry has held no record of the model at
        all (not even asleep: no supervisor lists it, so nobody will wake it) for that long."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        unseen_since = loop.time()
        while not pool.candidates():
            now = loop.time()
            left = deadline - now
            if left <= 0:
                return False
            if pool.endpoints or unregistered_s is None:
                unseen_since, look = now, RECHECK_S
            else:
                unseen = now - unseen_since
                if unseen >= unregistered_s:
                    raise unregistered(pool.model, unseen)
                look = min(RECHECK_S, unregistered_s - unseen)
            if rewake is not None:
                await self.request(rewake, "-")
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(left, look))
        return True


def unregistered(model: str, waited_s: float) -> ModelUnavailable:
    log.warning(
        "model=%s no record in the registry for %.1f s (is the supervisor running?): 503", model, waited_s
    )
    return ModelUnavailable(
        f"model '{model}' is not registered by any supervisor (no replica listed, not even asleep, for "
        f"{waited_s:.1f} s), so nothing can wake it; retry later",
        retry_after=RETRY_UNREGISTERED_S,
    )


class ReadyNotices:
    """A background step: one message of the model state channel at most per call, then ``on_ready(model)``.
    Subscribes on first use and again after a Redis failure."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: RedisKeys,
        on_ready: Callable[[str], Awaitable[None]],
        listen_s: float = 1.0,
    ) -> None:
        self.redis, self.keys, self.on_ready, self.listen_s = redis, keys, on_ready, listen_s
        self._pubsub: PubSub | None = None

    async def step(self) -> None:
        try:
            model = await self._next()
        except REDIS_DOWN as exc:
            log.warning("model state notices interrupted (%s); subscribing again", exc)
            await self.close()
            await asyncio.sleep(self.listen_s)
            return
        if model is not None:
            log.info("model=%s state change announced: registry re-read", model)
            await self.on_ready(model)

    async def _next(self) -> str | None:
        if self._pubsub is None:
            pubsub = self.redis.pubsub()
            await pubsub.subscribe(self.keys.state_channel)
            self._pubsub = pubsub
        msg = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=self.listen_s)
        if msg is None or msg.get("type") != "message":
            return None
        data = msg["data"]
        return data.decode() if isinstance(data, bytes) else str(data)

    async def close(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(*REDIS_DOWN):
                await pubsub.aclose()  # type: ignore[no-untyped-call,unused-ignore]
