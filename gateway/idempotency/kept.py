"""A stream with an ``Idempotency-Key``: relayed with an ``id:`` on every event, its events kept in Redis
(gateway/idempotency/events.py), and its generation not tied to its client.

A producer task reads the relay's generator (gateway/pipeline/relay.py: the lease, the upstream, the
settle) and hands each batch of framed events to the client's response through a queue, writing them to
Redis in batches of up to ``BATCH`` events, each written ``FLUSH_S`` after its first event at the latest
(one round trip a batch). When the client goes away, the producer runs on for the model's
``stream_grace_s``: a request that comes back with the key (and ``Last-Event-ID``) on any gateway claims
it and follows it from Redis; unclaimed by then it is cancelled (the relay's generator is closed:
upstream aborted, lease released) and the key freed. ``0`` cancels it at once, as a stream without a
key. At its end the stream's bytes become the key's answer (store.py).
The producers and their grace timers are tasks of :class:`KeptStreams`, each watched for errors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable
from typing import Any

from gateway.errors import ClientClosedRequest, sse_error_event
from gateway.idempotency.events import Event, EventIds, EventLog, Verdict, tail
from gateway.idempotency.store import IdempotencyStore, KeyNames
from gateway.metrics import GatewayMetrics
from gateway.redis_clients import REDIS_DOWN
from gateway.values import RequestContext
from llmgw_contract.supervision import cancelled

log = logging.getLogger("llmgw.proxy")
BATCH, FLUSH_S = 32, 0.05


class KeptStreams:
    """The running producers and grace timers of one gateway (a failure is logged and counted)."""

    def __init__(self, store: IdempotencyStore, events: EventLog, metrics: GatewayMetrics) -> None:
        self.store, self.events, self.metrics = store, events, metrics
        self.tasks: set[asyncio.Task[None]] = set()

    def spawn(self, step: Awaitable[None], name: str) -> asyncio.Task[None]:
        task = asyncio.ensure_future(step)
        self.tasks.add(task)
        task.add_done_callback(lambda t: self.watched(t, name))
        return task

    def watched(self, task: asyncio.Task[None], name: str) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.metrics.task_failures.labels(name).inc()
            log.error("%s failed", name, exc_info=task.exception())

    async def aclose(self) -> None:
        """At shutdown (after the open streams were ended): what still runs or waits is cancelled."""
        await cancelled(list(self.tasks))

    def keep(
        self,
        ctx: RequestContext,
        keys: KeyNames,
        parts: AsyncIterable[Any],
        grace_s: float,
        gone: asyncio.Future[None] | None = None,
    ) -> AsyncIterator[bytes]:
        """The client's side of a kept stream; its producer starts now. ``gone``: the server's future that
        ends when the client leaves, also before the response began (its relay never started, so never
        ended either)."""
        kept = Kept(self, ctx, keys, parts, grace_s)
        kept.producer = self.spawn(kept.produce(), "kept_stream")
        if gone is not None:
            gone.add_done_callback(lambda _: kept.left())
        return kept.relay()


class Kept:
    """One kept stream (see the module docstring)."""

    def __init__(
        self,
        streams: KeptStreams,
        ctx: RequestContext,
        keys: KeyNames,
        parts: AsyncIterable[Any],
        grace: float,
    ) -> None:
        self.streams, self.ctx, self.keys, self.parts, self.grace = streams, ctx, keys, parts, grace
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.client = True
        self.producer: asyncio.Task[None] | None = None

    async def relay(self) -> AsyncIterator[bytes]:
        """What the client's response sends: the framed events as the producer hands them over."""
        over = False
        try:
            while (item := await self.queue.get()) is not None:
                yield item
            over = True
        finally:
            if not over:
                self.left()

    def left(self) -> None:
        """The client went away before the end: the grace period starts (none: cancelled now); once."""
        if not self.client:
            return
        self.client = False
        assert self.producer is not None
        if self.producer.done():
            return
        if self.grace <= 0:
            self.producer.cancel()
            return
        log.info(
            "request_id=%s client left: the stream runs on %.1f s for it", self.ctx.request_id, self.grace
        )
        self.streams.spawn(self.expire(self.producer), "kept_stream_grace")

    async def expire(self, producer: asyncio.Task[None]) -> None:
        await asyncio.sleep(self.grace)  # the grace period itself
        if producer.done() or await self.streams.store.claimed(self.keys.record):
            return
        self.streams.metrics.idempotent.labels("grace_expired").inc()
        log.info("request_id=%s unclaimed after %.1f s: stream cancelled", self.ctx.request_id, self.grace)
        producer.cancel()

    async def produce(self) -> None:
        """Reads the relay to its end (or a cancel), framing, handing over and writing its events: a batch
        is written once it holds ``BATCH`` events, or ``FLUSH_S`` after its first (also while the replica
        sends nothing: a client that comes back sees every event the first one got within ``FLUSH_S``)."""
        store, ctx = self.streams.store, self.ctx
        ids, sent, complete = EventIds(), bytearray(), False
        batch: list[Event] = []
        loop = asyncio.get_running_loop()
        renewed = batch_at = loop.time()
        chunks = aiter(self.parts)
        try:
            while True:
                step = asyncio.ensure_future(anext(chunks))
                try:
                    if batch:  # written FLUSH_S after its first event, also while the next chunk comes
                        left = batch_at + FLUSH_S - loop.time()
                        if left > 0:
                            await asyncio.wait((step,), timeout=left)
                        if loop.time() >= batch_at + FLUSH_S:
                            await self.flush(batch)
                            batch = []
                    await asyncio.wait((step,))  # (a cancel of this task stays here: see below)
                    chunk = step.result()
                except StopAsyncIteration:
                    break
                finally:
                    if not step.done():  # cancelled while it waited: the relay's read goes with it, and
                        step.cancel()  # whatever the read made of that cancel, aclose() below ends it
                        await asyncio.gather(step, return_exceptions=True)
                framed = ids.feed(chunk)
                if framed:
                    self.out(framed, sent)
                    batch_at = batch_at if batch else loop.time()
                    batch += framed
                if len(batch) >= BATCH:
                    await self.flush(batch)
                    batch = []
                if loop.time() - renewed > store.running_ttl_ms / 3000:
                    renewed = loop.time()
                    await quietly(store.renew(self.keys.record, ctx.request_id), ctx)
            batch += self.out(ids.tail(), sent)
            complete = True
        finally:
            aclose = getattr(self.parts, "aclose", None)
            if aclose is not None:
                await aclose()
            try:  # the record first: a client that saw the end and asks again gets the stored answer
                await self.settle(batch, complete, bytes(sent))
            finally:
                self.queue.put_nowait(None)

    async def settle(self, batch: list[Event], complete: bool, sent: bytes) -> None:
        store, ctx = self.streams.store, self.ctx
        if complete:
            await self.flush(batch, end=True)
            await quietly(
                store.finish(self.keys.record, ctx.request_id, 200, "text/event-stream", True, sent), ctx
            )
        else:
            await quietly(store.release(self.keys.record, ctx.request_id), ctx)
            await quietly(self.streams.events.drop(self.keys.events), ctx)

    def out(self, framed: list[Event], sent: bytearray) -> list[Event]:
        data = b"".join(e for _, e in framed)
        sent += data
        if self.client and data:
            self.queue.put_nowait(data)
        return framed

    async def flush(self, batch: list[Event], end: bool = False) -> None:
        store = self.streams.store
        ttl = store.ttl_ms if end else store.running_ttl_ms
        if batch or end:
            await quietly(self.streams.events.append(self.keys.events, batch, ttl, end), self.ctx)


def follow(
    store: IdempotencyStore, events: EventLog, keys: KeyNames, after: int, holder: str, dialect: Any
) -> AsyncIterator[bytes]:
    """A kept stream's events after id ``after`` from Redis, then the live rest as it is written, to its
    end; a stream whose request ended without finishing (cancelled, its gateway gone) ends with an SSE
    error event that may be retried."""

    async def verdict() -> Verdict:
        record = await store.read(keys.record)
        if record is None or (record.request_id != holder and not record.done):
            err = ClientClosedRequest("the request that held this Idempotency-Key ended unfinished; retry it")
            return sse_error_event(err, dialect)
        return "over" if record.done else "running"

    return tail(events, keys.events, after, verdict)


async def quietly(step: Awaitable[None], ctx: RequestContext) -> None:
    """A record's or event log's update: Redis failing loses it (logged), never the answer. A cancel that
    came meanwhile (redis-py may turn one into a connection error) is raised, never lost."""
    try:
        await step
    except REDIS_DOWN as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError from exc
        log.warning("request_id=%s idempotency record not updated (Redis: %s)", ctx.request_id, exc)
