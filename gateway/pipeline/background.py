"""The Responses API's background mode on the request path, on any gateway, for the tenant that owns the
response (gateway/responses_api/background.py runs it and keeps its record and events):

- ``POST /v1/responses`` with ``background: true``: answered at once with the response object (status
  ``queued``, ``background: true``, the gateway's id ``resp_bg...``); with ``stream: true`` too, its
  events as they come. ``store: false`` is refused (400), as OpenAI does.
- ``GET /v1/responses/{id}``: the object as it stands; ``?stream=true`` its events from the first (or
  those after ``starting_after=N``: the events with a higher ``sequence_number``), kept ones first, then
  live ones to its end.
- ``POST /v1/responses/{id}/cancel``: a response still queued or in progress is cancelled (its
  generation stopped wherever it runs); the object is answered, as it stands for a finished one.

Another tenant's id, or one expired: 404 ``response_not_found``, as for a response never made.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from urllib.parse import parse_qs

import orjson
from starlette.responses import Response

from gateway.errors import InvalidRequest, NoReadyReplica, ResponseNotFound
from gateway.idempotency.events import Verdict, tail
from gateway.pipeline.replies import WholeResponse
from gateway.pipeline.resolve import resolve
from gateway.pipeline.settle import finish
from gateway.redis_clients import REDIS_DOWN
from gateway.responses_api.background import BackgroundResponses, Names, Serve
from gateway.responses_api.background_events import (
    TERMINAL,
    initial,
    is_background,
    new_id,
    upstream_body,
    with_status,
)
from gateway.state import Gateway
from gateway.values import RequestContext

log = logging.getLogger("llmgw.proxy")
Relayed = Callable[[RequestContext, AsyncIterator[bytes]], Response]


async def served(gw: Gateway, ctx: RequestContext, serve: Serve, relayed: Relayed) -> Response | None:
    """The answer of a background response's create, GET or cancel; None for any other request."""
    try:
        if ctx.api.stored == "lookup" and is_background(ctx.response_id):
            if ctx.api.path.endswith("/cancel"):
                return await cancel(gw.background, ctx)
            return await retrieve(gw.background, ctx, relayed)
        if ctx.api.stored != "create" or ctx.payload is None or ctx.payload.get("background") is not True:
            return None
        resolve(ctx, gw.names, gw.lora.adapters)  # a model it may not use: refused now
        return await create(gw.background, ctx, serve, relayed)
    except REDIS_DOWN:
        raise NoReadyReplica(
            "background responses cannot be served while Redis is unreachable; retry later", retry_after=1.0
        ) from None


async def create(bg: BackgroundResponses, ctx: RequestContext, serve: Serve, relayed: Relayed) -> Response:
    """A background request (parsed, its model resolved): its record, its run started, the answer."""
    payload = ctx.payload or {}
    if payload.get("store") is False:
        raise InvalidRequest("background responses must be stored: store cannot be false", param="store")
    rid = new_id()
    names, obj = bg.store.names(ctx.caller.tenant, rid), initial(rid, payload)
    await bg.store.create(names, obj)
    run = RequestContext(
        rid, ctx.endpoint, upstream_body(payload), without_id(ctx.headers), time.perf_counter()
    )
    run.api, run.caller, run.path_model = ctx.api, ctx.caller, ctx.path_model
    bg.start(names, rid, obj, run, serve)
    log.info("request_id=%s background response %s queued", ctx.request_id, rid)
    ctx.progress.status = 200
    finish(ctx, bg.metrics)
    if ctx.stream:
        return relayed(ctx, follow(bg, names, -1))
    return WholeResponse(orjson.dumps(obj), 200, ctx.request_id, "application/json")


def without_id(headers: dict[str, str]) -> dict[str, str]:
    """The run's headers: its request id is the response's (the client's x-request-id is the POST's)."""
    return {k: v for k, v in headers.items() if k not in ("x-request-id", "idempotency-key")}


async def retrieve(bg: BackgroundResponses, ctx: RequestContext, relayed: Relayed) -> Response:
    names = bg.store.names(ctx.caller.tenant, ctx.response_id)
    found = await bg.store.read(names)
    if found is None:
        raise ResponseNotFound(f"no stored response '{ctx.response_id}' is known", param="response_id")
    query = parse_qs(ctx.query.decode("latin-1"))
    ctx.progress.status = 200
    finish(ctx, bg.metrics)
    if query.get("stream", ["false"])[0].lower() == "true":
        return relayed(ctx, follow(bg, names, starting_after(query)))
    return WholeResponse(orjson.dumps(found.obj), 200, ctx.request_id, "application/json")


def starting_after(query: dict[str, list[str]]) -> int:
    value = query.get("starting_after", ["-1"])[0]
    try:
        return max(-1, int(value))
    except ValueError:
        raise InvalidRequest("starting_after must be an integer", param="starting_after") from None


async def cancel(bg: BackgroundResponses, ctx: RequestContext) -> Response:
    """Cancelled unless already over (the status is set once: of this and the last event, one wins)."""
    names = bg.store.names(ctx.caller.tenant, ctx.response_id)
    found = await bg.store.read(names)
    if found is None:
        raise ResponseNotFound(f"no stored response '{ctx.response_id}' is known", param="response_id")
    obj = found.obj
    if found.status not in TERMINAL and await bg.store.update(names, "cancelled", obj):
        bg.stop(ctx.response_id)
        obj = with_status(obj, "cancelled")
        log.info("request_id=%s background response %s cancelled", ctx.request_id, ctx.response_id)
    elif found.status not in TERMINAL:  # it ended meanwhile: as it ended
        again = await bg.store.read(names)
        obj = again.obj if again is not None else obj
    ctx.progress.status = 200
    finish(ctx, bg.metrics)
    return WholeResponse(orjson.dumps(obj), 200, ctx.request_id, "application/json")


def follow(bg: BackgroundResponses, names: Names, after: int) -> AsyncIterator[bytes]:
    """The events after sequence number ``after``, kept then live, to the end entry (or, without one, to
    a record that says the response is over)."""

    async def verdict() -> Verdict:
        found = await bg.store.read(names)
        return "over" if found is None or found.status in TERMINAL else "running"

    return tail(bg.store.events, names.events, after + 1, verdict)
