"""The request path of a request with an ``Idempotency-Key`` (after authentication and the body: the key
is the tenant's, the fingerprint the body's). A request without one never comes here: the proxy's only
cost for it is one lookup in the headers it already read.

The key is claimed in Redis (store.py). The request that claims it runs as any other, and its answer is
kept as the key's record: a non-streamed answer's body once read, a stream's bytes once it ended (with
its SSE error event if it broke: the generation ran, and is not run again). Another request with the
same key and body, on any gateway, runs nothing: while the first runs (still admitted, routed or
generating) it waits, polling the record with a deadline, then gets the first one's answer byte for byte
(``idempotent-replayed: true``); once done it gets it at once. With another body: 422
``idempotency_key_reused``. A first request that ends before any replica can have run it (a refusal
that a retry may repeat, a client gone while it waited, a 4xx of the gateway's own) frees its key, and a
waiting one then claims it; one whose client leaves mid-stream frees it too (its generation is cancelled,
so the retry runs the only one left).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import Response, StreamingResponse

from gateway.errors import (
    ClientClosedRequest,
    GatewayError,
    IdempotencyKeyInUse,
    IdempotencyKeyReused,
    NoReadyReplica,
    error_bytes,
)
from gateway.idempotency.store import IdempotencyStore, Record, checked, fingerprint
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
    store = gw.idempotency
    key = store.key(ctx.caller.tenant, checked(idempotency_key))
    fp = fingerprint(f"{ctx.api.method} {ctx.api.name}", ctx.path_model or ctx.response_id, ctx.body)
    try:
        held = await hold(gw, ctx, key, fp, gone)
    except REDIS_DOWN:
        raise NoReadyReplica(
            "idempotency keys cannot be checked while Redis is unreachable; retry later", retry_after=1.0
        ) from None
    if held is not None:
        return replay(gw, ctx, held, relayed)
    try:
        response = await serve()
    except GatewayError as err:
        await ended(store, ctx, key, err)
        raise
    except BaseException:
        await quietly(store.release(key, ctx.request_id), ctx)
        raise
    if isinstance(response, StreamingResponse):
        response.body_iterator = kept(gw, ctx, key, response.body_iterator)
    else:
        body = bytes(response.body)
        await quietly(store.finish(key, ctx.request_id, ctx.status, ctx.reply_type, False, body), ctx)
    return response


async def hold(
    gw: Gateway, ctx: RequestContext, key: str, fp: str, gone: asyncio.Future[None] | None
) -> Record | None:
    """None once this request holds the key; the finished record of the request that held it (waited
    for while it runs, up to ``request_timeout_s``); raises on another body."""
    loop = asyncio.get_running_loop()
    deadline, interval, waited_for = loop.time() + gw.settings.request_timeout_s, FIRST_POLL_S, ""
    while True:
        record = await gw.idempotency.claim(key, fp, ctx.request_id)
        if record is None:
            return None
        if record.fingerprint != fp:
            gw.metrics.idempotent.labels("refused").inc()
            log.warning("request_id=%s idempotency key reused with another body: 422", ctx.request_id)
            raise IdempotencyKeyReused(
                "this Idempotency-Key was already used with another request (another body or endpoint);"
                " a new request needs a new key"
            )
        if record.done:
            outcome = "attached" if waited_for else "replayed"
            gw.metrics.idempotent.labels(outcome).inc()
            log.info("request_id=%s idempotency key %s: answer of request_id=%s", ctx.request_id, outcome,
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
        await asyncio.sleep(interval)
        interval = min(MAX_POLL_S, interval * 2)


def replay(gw: Gateway, ctx: RequestContext, record: Record, relayed: Relayed) -> Response:
    """The held answer again, byte for byte, under this request's id."""
    ctx.status = record.status
    finish(ctx, gw.metrics)
    if record.stream:
        return relayed(ctx, one(record.body), (REPLAYED,))
    extra = (REPLAYED, ("x-should-retry", "false")) if record.status >= 400 else (REPLAYED,)
    return WholeResponse(record.body, record.status, ctx.request_id, record.content_type, extra)


async def one(body: bytes) -> AsyncIterator[bytes]:
    yield body


async def ended(store: IdempotencyStore, ctx: RequestContext, key: str, err: GatewayError) -> None:
    """A failed first request: its key freed when nothing can have run it (a retry may run it), else the
    error kept as its answer."""
    if err.retry or ctx.attempts == 0 or isinstance(err, ClientClosedRequest):
        await quietly(store.release(key, ctx.request_id), ctx)
        return
    body = error_bytes(err, ctx.api.dialect)
    await quietly(store.finish(key, ctx.request_id, err.status, "application/json", False, body), ctx)


async def kept(gw: Gateway, ctx: RequestContext, key: str, parts: AsyncIterable[Any]) -> AsyncIterator[bytes]:
    """The stream as relayed, its bytes kept; stored once it ended, or the key freed when its client
    left first (the relay's generator, and with it the generation, is closed). The running record is
    renewed every third of its TTL."""
    store, sent, complete = gw.idempotency, bytearray(), False
    renewed, every = time.monotonic(), store.running_ttl_ms / 3000
    try:
        async for chunk in parts:
            sent += chunk
            yield chunk
            if time.monotonic() - renewed > every:
                renewed = time.monotonic()
                await quietly(store.renew(key, ctx.request_id), ctx)
        complete = True
    finally:
        aclose = getattr(parts, "aclose", None)
        if aclose is not None:
            await aclose()
        if complete:
            await quietly(store.finish(key, ctx.request_id, 200, "text/event-stream", True, bytes(sent)), ctx)
        else:
            await quietly(store.release(key, ctx.request_id), ctx)


async def quietly(step: Awaitable[None], ctx: RequestContext) -> None:
    """A record's update after the answer was decided: Redis failing loses the record (logged), never
    the answer."""
    try:
        await step
    except REDIS_DOWN as exc:
        log.warning("request_id=%s idempotency record not updated (Redis: %s)", ctx.request_id, exc)
