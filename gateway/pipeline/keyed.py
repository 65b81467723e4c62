"""The request path of a request with an ``Idempotency-Key`` (after authentication and the body: the key
is the tenant's, the fingerprint the body's). A request without one never comes here: the proxy's only
cost for it is one lookup in the headers it already read.

The key is claimed in Redis (gateway/idempotency/store.py). The request that claims it runs as any
other, and its answer is kept as the key's record: a non-streamed answer's body once read; a stream is
kept as it passes, its events numbered (``id:``) and written to Redis, and runs on for the model's
``stream_grace_s`` once its client left (gateway/idempotency/kept.py); a request sent to a replica is
not cancelled when its client leaves before its first byte (gateway/pipeline/proxy.py, ``kept_watch``),
so a non-streamed one runs on to its answer. Another request with the same
key and body, on any gateway, runs nothing (``idempotent-replayed: true``):

- a stream follows the running one from Redis once its first event is there (from the start, or after
  its ``Last-Event-ID``), byte for byte, to its end; a finished one is given again whole (or after its
  ``Last-Event-ID``);
- a non-streamed request waits, polling the record with a deadline, for the first one's answer.

With another body: 422 ``idempotency_key_reused``. A first request that ends before any replica can have
run it (a refusal that a retry may repeat, a client gone while it waited, a 4xx of the gateway's own)
frees its key, and a waiting one then claims it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.responses import Response, StreamingResponse

from gateway.errors import (
    ClientClosedRequest,
    GatewayError,
    IdempotencyKeyInUse,
    IdempotencyKeyReused,
    NoReadyReplica,
    error_bytes,
)
from gateway.idempotency.events import last_event_id
from gateway.idempotency.kept import follow, quietly
from gateway.idempotency.store import KeyNames, Record, checked, fingerprint
from gateway.pipeline.replies import WholeResponse
from gateway.pipeline.settle import finish
from gateway.redis_clients import REDIS_DOWN
from gateway.state import Gateway
from gateway.values import RequestContext

log = logging.getLogger("llmgw.proxy")
REPLAYED = ("idempotent-replayed", "true")
FIRST_POLL_S, MAX_POLL_S = 0.02, 0.25
Relayed = Callable[[RequestContext, AsyncIterator[bytes], tuple[tuple[str, str], ...]], Response]


async def keyed(
    gw: Gateway,
    ctx: RequestContext,
    idempotency_key: str,
    serve: Callable[[], Awaitable[Response]],
    gone: asyncio.Future[None] | None,
    relayed: Relayed,
) -> Response:
    """The answer of a keyed request: its own (``serve``), or the one its key already holds."""
    keys = gw.idempotency.key(ctx.caller.tenant, checked(idempotency_key))
    fp, streamed = fingerprint(
        f"{ctx.api.method} {ctx.api.name}", ctx.path_model or ctx.response_id, ctx.body
    )
    after = last_event_id(ctx.headers.get("last-event-id")) if streamed else None
    try:
        held = await hold(gw, ctx, keys, fp, gone, streamed, after)
        if held is not None:
            return await given(gw, ctx, keys, held, after, relayed)
    except REDIS_DOWN:
        raise NoReadyReplica(
            "idempotency keys cannot be checked while Redis is unreachable; retry later", retry_after=1.0
        ) from None
    try:
        response = await serve()
    except GatewayError as err:
        await ended(gw, ctx, keys, err)
        raise
    except BaseException:
        await quietly(gw.idempotency.release(keys.record, ctx.request_id), ctx)
        raise
    if isinstance(response, StreamingResponse):
        grace = ctx.model.stream_grace_s if ctx.model is not None else 0.0
        response.body_iterator = gw.kept.keep(ctx, keys, response.body_iterator, grace, gone)
    else:
        body = bytes(response.body)
        status, kind = ctx.progress.status, ctx.progress.reply_type
        try:
            await quietly(gw.idempotency.finish(keys.record, ctx.request_id, status, kind, False, body), ctx)
        except BaseException:  # cancelled: the answer is never sent, so it settles here
            if isinstance(response, WholeResponse):
                await response.settle()
            raise
    return response


async def hold(
    gw: Gateway,
    ctx: RequestContext,
    keys: KeyNames,
    fp: str,
    gone: asyncio.Future[None] | None,
    streamed: bool,
    after: int | None,
) -> Record | None:
    """None once this request holds the key; else the record of the request that holds it: finished,
    or (for a stream) once its first event is kept. Waited for up to ``request_timeout_s``; raises on
    another body."""
    loop = asyncio.get_running_loop()
    deadline, interval, waited_for = loop.time() + gw.settings.request_timeout_s, FIRST_POLL_S, ""
    while True:
        record = await gw.idempotency.claim(keys.record, fp, ctx.request_id)
        if record is None:
            return None
        if record.fingerprint != fp:
            gw.metrics.idempotent.labels("refused").inc()
            log.warning("request_id=%s idempotency key reused with another body: 422", ctx.request_id)
            raise IdempotencyKeyReused(
                "this Idempotency-Key was already used with another request (another body or endpoint);"
                " a new request needs a new key"
            )
        if record.done or (streamed and await gw.kept.events.after(keys.events, 0, count=1)):
            outcome = (
                "resumed"
                if after is not None
                else "replayed"
                if record.done and not waited_for
                else "attached"
            )
            gw.metrics.idempotent.labels(outcome).inc()
            log.info("request_id=%s idempotency key %s: the answer of request_id=%s", ctx.request_id, outcome,
                     record.request_id)  # fmt: skip
            return record
        if not waited_for:
            waited_for = record.request_id
            log.info("request_id=%s idempotency key held by running request_id=%s: waiting", ctx.request_id,
                     waited_for)  # fmt: skip
        if gone is not None and gone.done():
            raise ClientClosedRequest("the client disconnected while its key's first request ran")
        if loop.time() >= deadline:
            raise IdempotencyKeyInUse(
                f"the request holding this Idempotency-Key ({record.request_id}) is still running; retry",
                retry_after=1.0,
            )
        await asyncio.sleep(interval)  # polled: the holder's answer, or its key freed
        interval = min(MAX_POLL_S, interval * 2)


async def given(
    gw: Gateway, ctx: RequestContext, keys: KeyNames, record: Record, after: int | None, relayed: Relayed
) -> Response:
    """The held answer again, byte for byte, under this request's id: a stream still running (or resumed
    after an event) followed from Redis, else the stored answer."""
    ctx.progress.status = record.status or 200
    finish(ctx, gw.metrics)
    if not record.done or (record.stream and after is not None):
        await gw.idempotency.claim_stream(keys.record)
        parts = follow(gw.idempotency, gw.kept.events, keys, after or 0, record.request_id, ctx.api.dialect)
        return relayed(ctx, parts, (REPLAYED,))
    if record.stream:
        return relayed(ctx, one(record.body), (REPLAYED,))
    extra = (REPLAYED, ("x-should-retry", "false")) if record.status >= 400 else (REPLAYED,)
    return WholeResponse(record.body, record.status, ctx.request_id, record.content_type, extra)


async def one(body: bytes) -> AsyncIterator[bytes]:
    yield body


async def ended(gw: Gateway, ctx: RequestContext, keys: KeyNames, err: GatewayError) -> None:
    """A failed first request: its key freed when nothing can have run it (a retry may run it), else the
    error kept as its answer."""
    store = gw.idempotency
    if err.retry or ctx.progress.attempts == 0 or isinstance(err, ClientClosedRequest):
        await quietly(store.release(keys.record, ctx.request_id), ctx)
        return
    body = error_bytes(err, ctx.api.dialect)
    await quietly(store.finish(keys.record, ctx.request_id, err.status, "application/json", False, body), ctx)
