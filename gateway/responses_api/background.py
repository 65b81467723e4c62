"""Background Responses (``background: true``): run by a gateway, kept in Redis, answered by any gateway.

The record of one response is a hash per tenant and id (:meth:`RedisKeys.background`): ``status``
(queued, in_progress, then completed, failed, cancelled or incomplete) and ``obj`` (the response object
as it stands). Its events are a Redis stream (:meth:`RedisKeys.background_events`, entry ``0-<n+1>`` for
sequence number n, gateway/idempotency/events.py's :class:`EventLog`) ending with an end entry. While a
gateway runs it, ``...:run`` exists (renewed every ``BEAT_S``, expiring after ``RUN_TTL_S``): a response
left unfinished without it was lost with its gateway and reads as failed. All expire after
``responses_ttl_s``. A status once terminal never changes (one script): of a cancel and the last event,
whichever comes first is the answer.

:class:`BackgroundResponses` runs this gateway's: the generation is the request path's own (admitted,
its lease held to its end, charged, forwarded as a stream: ``serve``), its bytes turned into the
response's events (background_events.py) and written in batches (as keyed streams are: up to ``BATCH``
events a pipeline, each written within ``FLUSH_S`` of its coming, or ``WATCH_S`` while the replica
pauses; a status change at once, before the record says it). A cancel
(any gateway: the record's status) is seen within ``WATCH_S`` by the running gateway, which stops the
generation (upstream aborted, lease released).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import redis.asyncio as aioredis
from starlette.responses import Response, StreamingResponse

from gateway.errors import GatewayError
from gateway.idempotency.events import EventLog
from gateway.idempotency.kept import KeptStreams, quietly
from gateway.metrics import GatewayMetrics
from gateway.redis_clients import REDIS_DOWN
from gateway.responses_api.background_events import TERMINAL, Event, Renumbered, error_of, with_status
from gateway.values import RequestContext
from llmgw_contract.redis_keys import RedisKeys

log = logging.getLogger("llmgw.proxy")
WATCH_S, BEAT_S, RUN_TTL_S = 0.1, 3.0, 15.0
BATCH, FLUSH_S = 32, 0.05
UPDATE = """
local s = redis.call('HGET', KEYS[1], 'status')
if not s or s == 'completed' or s == 'failed' or s == 'cancelled' or s == 'incomplete' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'obj', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""
LOST = {"code": "server_error", "message": "the gateway that ran this background response stopped"}


@dataclass(frozen=True, slots=True)
class Names:
    """The Redis keys of one background response."""

    record: str
    events: str
    run: str


@dataclass(frozen=True, slots=True)
class Found:
    """A response's record as read: its status and object (a lost one's as failed)."""

    status: str
    obj: dict[str, Any]


class BackgroundStore:
    """Creates, reads and updates the records (see the module docstring)."""

    def __init__(self, redis: aioredis.Redis, keys: RedisKeys, events: EventLog, ttl_s: float) -> None:
        self.redis, self.keys, self.events, self.ttl_ms = redis, keys, events, int(ttl_s * 1000)
        self.update_script = redis.register_script(UPDATE)

    def names(self, tenant: str, response_id: str) -> Names:
        k = self.keys
        return Names(
            k.background(tenant, response_id),
            k.background_events(tenant, response_id),
            k.background_run(tenant, response_id),
        )

    async def create(self, names: Names, obj: dict[str, Any]) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(names.record, mapping={"status": obj["status"], "obj": orjson.dumps(obj)})
            pipe.pexpire(names.record, self.ttl_ms)
            pipe.set(names.run, 1, px=int(RUN_TTL_S * 1000))
            await pipe.execute()

    async def read(self, names: Names) -> Found | None:
        """The record owned by ``names``' tenant; None when there is none (another tenant's, expired)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(names.record, ["status", "obj"])
            pipe.exists(names.run)
            (status, obj), running = await pipe.execute()
        if status is None or obj is None:
            return None
        found = Found(status.decode(), orjson.loads(obj))
        if found.status not in TERMINAL and not running:
            return Found("failed", with_status(found.obj, "failed", LOST))
        return found

    async def update(self, names: Names, status: str, obj: dict[str, Any]) -> bool:
        """Sets the status and object unless the status is terminal already; True when it was set."""
        args: list[Any] = [status, orjson.dumps(with_status(obj, status)), self.ttl_ms]
        return bool(await self.update_script(keys=[names.record], args=args))

    async def over(self, names: Names) -> None:
        await self.redis.delete(names.run)

    async def beat(self, names: Names) -> None:
        await self.redis.set(names.run, 1, px=int(RUN_TTL_S * 1000))


Serve = Callable[[RequestContext], Awaitable[Response]]


class BackgroundResponses:
    """This gateway's running background responses (tasks of :class:`KeptStreams`: watched, and ended
    at shutdown)."""

    def __init__(self, store: BackgroundStore, kept: KeptStreams, metrics: GatewayMetrics) -> None:
        self.store, self.kept, self.metrics = store, kept, metrics
        self.running: dict[str, asyncio.Task[None]] = {}

    def start(self, names: Names, rid: str, obj: dict[str, Any], ctx: RequestContext, serve: Serve) -> None:
        self.metrics.background.labels("created").inc()
        run = Run(self, names, rid, obj, ctx)
        task = self.kept.spawn(run.run(serve), "background_response")
        self.running[rid] = task
        task.add_done_callback(lambda _: self.running.pop(rid, None))

    def stop(self, rid: str) -> None:
        """A cancel of a response this gateway runs: stopped now (others see the record's status)."""
        task = self.running.get(rid)
        if task is not None:
            task.cancel()


class Run:
    """One background response's generation, run to its end (see the module docstring)."""

    def __init__(
        self, owner: BackgroundResponses, names: Names, rid: str, obj: dict[str, Any], ctx: RequestContext
    ) -> None:
        self.owner, self.names, self.rid, self.ctx = owner, names, rid, ctx
        self.events, self.written = Renumbered(rid, obj), str(obj.get("status", ""))
        self.pending: list[Event] = []
        self.pending_at, self.lock = 0.0, asyncio.Lock()

    async def run(self, serve: Serve) -> None:
        watcher = self.owner.kept.spawn(self.watch(asyncio.current_task()), "background_response_watch")
        store, status = self.owner.store, ""
        try:
            await self.generate(serve)
        except asyncio.CancelledError:
            found = await store.read(self.names)
            status = found.status if found is not None else ""
            if status != "cancelled":  # not a cancel of the response: the gateway stops
                await self.write(self.events.failed(LOST), final=True)
            await self.flush()
            raise
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            status = status or self.events.status
            self.owner.metrics.background.labels(status if status in TERMINAL else "failed").inc()
            log.info("request_id=%s background response %s %s", self.ctx.request_id, self.rid, status)
            await quietly(store.events.append(self.names.events, [], store.ttl_ms, end=True), self.ctx)
            await quietly(store.over(self.names), self.ctx)

    async def generate(self, serve: Serve) -> None:
        try:
            response = await serve(self.ctx)
        except GatewayError as err:
            await self.write([self.events.failed({"code": err.code, "message": err.message})], final=True)
            return
        if not isinstance(response, StreamingResponse):  # the replica refused it: its error answer
            await self.write([self.events.failed(error_of(bytes(response.body)))], final=True)
            return
        parts: AsyncIterable[Any] = response.body_iterator
        try:
            async for chunk in parts:
                await self.write(self.events.feed(chunk if isinstance(chunk, bytes) else bytes(chunk)))
            await self.write(self.events.ended(), final=True)
        finally:
            aclose = getattr(parts, "aclose", None)
            if aclose is not None:
                await aclose()

    async def write(self, events: list[Event] | Event, final: bool = False) -> None:
        """The events, written in batches: once ``BATCH`` wait, ``FLUSH_S`` after the first (here or at
        the watcher's next look), at once when the status moved (the record follows its events)."""
        batch, now = events if isinstance(events, list) else [events], asyncio.get_running_loop().time()
        if batch and not self.pending:
            self.pending_at = now
        self.pending += batch
        moved = self.events.status != self.written
        if final or moved or len(self.pending) >= BATCH or now - self.pending_at >= FLUSH_S:
            await self.flush(final)

    async def flush(self, final: bool = False) -> None:
        """The waiting events (one pipeline) and, when the status moved, the record; one flush at a time
        (the stream's entries must come in order)."""
        store = self.owner.store
        async with self.lock:
            batch, self.pending = self.pending, []
            if batch:
                entries = [(seq + 1, data) for seq, data in batch]
                await quietly(store.events.append(self.names.events, entries, store.ttl_ms), self.ctx)
            if final or self.events.status != self.written:
                self.written = self.events.status
                await quietly(self.update(), self.ctx)

    async def update(self) -> None:
        await self.owner.store.update(self.names, self.events.status, self.events.obj)

    async def watch(self, task: asyncio.Task[Any] | None) -> None:
        """Every ``WATCH_S``: the response cancelled (by any gateway) stops its generation; every
        ``BEAT_S`` the run's heartbeat."""
        store, loop = self.owner.store, asyncio.get_running_loop()
        beat = loop.time()
        while True:
            await asyncio.sleep(WATCH_S)  # polled: a cancel from another gateway
            try:
                found = await store.redis.hget(self.names.record, "status")
            except REDIS_DOWN:
                continue
            if found == b"cancelled" and task is not None:
                task.cancel()
                return
            if self.pending and loop.time() - self.pending_at >= FLUSH_S:  # the replica paused
                await self.flush()
            if loop.time() - beat >= BEAT_S:
                beat = loop.time()
                await quietly(store.beat(self.names), self.ctx)
