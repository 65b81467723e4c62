"""The request path: the seven steps of one proxied request, in order.

1. authenticate from the head (gateway/auth), before any of the body is read, 2. parse (parse.py),
3. resolve the model and the stored response it names (resolve.py, gateway/responses_api) and charge
its token cost (settle.py), 4. admit (admit.py), 5. pick and 6. forward (forward.py), 7. finish: relay
the answer and settle (relay.py, settle.py); a whole answer is written first and settled right after,
in the same task (replies.py ``WholeResponse.after``). Intake (intake.py) reads the request's head
before step 1 and its body, bounded in size and time, after it; the client is watched from step 4 to the
answer (watch.py). A failure at any step is answered in the API's own shape, never raised. A stream for
a model at zero replicas is answered at once and held within its stream (held_stream.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from starlette.responses import Response
from starlette.types import Receive, Scope

from gateway.endpoints import Route
from gateway.errors import GatewayError, InternalError, ModelNotFound, error_response
from gateway.migration.stream import plan_migration
from gateway.migration.whole import plan_whole
from gateway.pipeline import background as background_api
from gateway.pipeline.admit import admit, at_zero, held_eta
from gateway.pipeline.body import write_body
from gateway.pipeline.held_stream import held_stream
from gateway.pipeline.intake import read_body, request_id, upstream_id, wanted_headers
from gateway.pipeline.keyed import keyed
from gateway.pipeline.media import check_media
from gateway.pipeline.parse import parse, route_request
from gateway.pipeline.relay import answer, streaming
from gateway.pipeline.replies import RelayResponse, WholeResponse
from gateway.pipeline.resolve import resolve
from gateway.pipeline.settle import charge, finish, refund
from gateway.pipeline.watch import client_watch, watched
from gateway.responses_api.stored import locate, locate_previous
from gateway.state import Gateway
from gateway.values import GONE, RequestContext
from llmgw_contract.fleet import Model

log = logging.getLogger("llmgw.proxy")
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


class Proxy:
    """Serves every path of the allow-list (gateway/endpoints.py) for one gateway."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.media_domains = frozenset(d.lower().strip(".") for d in gw.settings.media_domains)

    async def respond(
        self, scope: Scope, receive: Receive, api: Route, response_id: str = "", path_model: str = ""
    ) -> Response:
        """The whole request path for one request; always returns a response, never raises.
        ``path_model``: the model of a per-model base path (``/models/{model}/...``)."""
        headers = wanted_headers(scope)
        ctx = RequestContext(request_id(headers), api.name, b"", headers, time.perf_counter())
        ctx.api, ctx.response_id, ctx.query = api, response_id, scope.get("query_string", b"")
        ctx.path_model = path_model
        ctx.progress.upstream_id = upstream_id(ctx.request_id, headers)
        self.gw.tracing.begin(ctx, headers.get("traceparent", ""), headers.get("tracestate", ""))
        try:
            with self.gw.tracing.span(ctx, "authenticate"):  # 1, from the head: no body read without a key
                ctx.caller = await self.gw.auth.authenticate(headers)
            s = self.gw.settings
            ctx.body = await read_body(receive, s.max_body_bytes, s.body_timeout_s, s.body_min_rate_bytes_s)
            gone, key = scope.get(GONE), headers.get("idempotency-key")
            if key is None:  # the hot path: nothing more for a request without a key
                return await self.serve(ctx, receive, gone)
            return await keyed(self.gw, ctx, key, lambda: self.serve(ctx, receive, gone), gone, self.relayed)
        except GatewayError as err:
            return await self.fail(ctx, err)
        except Exception:
            log.exception("request_id=%s unexpected error", ctx.request_id)
            return await self.fail(ctx, InternalError("the gateway failed to serve this request"))

    async def serve(
        self, ctx: RequestContext, receive: Receive, gone: asyncio.Future[None] | None
    ) -> Response:
        gw, s = self.gw, self.gw.settings
        parse(ctx, s.prefix_chars, s.prefix_chunk_bytes, s.prefix_max_chunks, prompt_keys=False)  # 2
        if ctx.api.stored and (kept := await self.background(ctx, receive)) is not None:
            return kept  # a background response: run by a gateway, answered from Redis
        if ctx.media:
            await check_media(ctx.media, self.media_domains)
        await locate(ctx, gw.names, gw.affinity)  # 3 (a GET or cancel: its model is the response's)
        model = resolve(ctx, gw.names, gw.lora.adapters)
        policy = gw.policies.get(model.name)
        if ctx.payload is not None and (policy is None or policy.reads_prompt):  # its prefix key and chain
            ctx.route = route_request(
                ctx, ctx.payload, s.prefix_chars, s.prefix_chunk_bytes, s.prefix_max_chunks
            )
        await locate_previous(ctx, model, gw.affinity, s.auth)
        # a generation that may move mid-way (gateway/migration): streamed, or asked whole
        ctx.migration = plan_migration(ctx, model) if ctx.stream else plan_whole(ctx, model)
        write_body(ctx)  # the body sent upstream, written once (body.py)
        await charge(gw, ctx)
        limits = ctx.charge.headers if ctx.charge is not None else ()  # the key's x-ratelimit-* headers
        pool = gw.table.find(model.name)
        if pool is None:  # a fleet reload removed the model since it was resolved
            raise ModelNotFound(f"The model '{model.name}' does not exist", param="model")
        if ctx.stream and at_zero(model, pool):  # held through a start: the head now, comments meanwhile
            eta = await held_eta(gw, ctx)  # (a deadline shorter than the ETA: the 503, before any head)
            return self.relayed(ctx, held_stream(gw, ctx, pool, eta), limits)
        with client_watch(receive, gone) as watch:
            lease = await admit(gw, ctx, pool, watch)  # 4
            parts = answer(gw, ctx, pool, lease)  # 5, 6, 7 (the lease is held and released there)
            left = "the client disconnected before the answer was ready"
            first = await watched(anext(parts), kept_watch(ctx, model, watch), left, gw.open_requests)
        if streaming(ctx):
            return self.relayed(ctx, parts, limits)
        # the whole answer goes first; its settle (release, refunds, the access line) once it is written
        status, kind = ctx.progress.status, ctx.progress.reply_type
        return WholeResponse(first, status, ctx.request_id, kind, limits, after=parts.aclose)

    async def background(self, ctx: RequestContext, receive: Receive) -> Response | None:
        """A background Response's create, GET or cancel (gateway/pipeline/background.py); None
        for any other Responses request. Its run is this request path, with no client to watch."""

        async def run(run: RequestContext) -> Response:
            response = await self.serve(run, receive, asyncio.get_running_loop().create_future())
            if isinstance(response, WholeResponse):  # never sent (the run keeps its events): settled now
                await response.settle()
            return response

        return await background_api.served(self.gw, ctx, run, self.relayed)

    def relayed(
        self, ctx: RequestContext, parts: AsyncIterator[bytes], limits: tuple[tuple[str, str], ...] = ()
    ) -> RelayResponse:
        """The stream's response; a client that stops reading for ``stream_write_timeout_s``, or reads
        slower than ``stream_min_rate_bytes_s`` while the stream waits for it, ends it."""
        headers = {**SSE_HEADERS, "x-request-id": ctx.request_id, **dict(limits)}
        response = RelayResponse(parts, 200, headers, media_type="text/event-stream")
        response.write_timeout_s = self.gw.settings.stream_write_timeout_s
        response.min_rate = self.gw.settings.stream_min_rate_bytes_s

        def stalled(reason: str) -> None:
            self.gw.metrics.stream_stalled.labels(ctx.model_label).inc()
            ctx.progress.error = reason
            log.warning("request_id=%s model=%s %s", ctx.request_id, ctx.model_label, ctx.progress.error)

        response.on_stalled = stalled
        return response

    async def fail(self, ctx: RequestContext, err: GatewayError) -> Response:
        """The failure's answer in the API's shape; what the request was charged is refunded."""
        await refund(self.gw, ctx, 0, 0)
        ctx.progress.status, ctx.progress.error = err.status, err.message
        finish(ctx, self.gw.metrics)
        response = error_response(err, ctx.api.dialect)
        response.headers["x-request-id"] = ctx.request_id
        return response


def kept_watch(ctx: RequestContext, model: Model, watch: asyncio.Future[None]) -> asyncio.Future[None]:
    """The watch over a request's wait for its first part (a stream's first bytes, a whole answer): the
    client's, except for a request with an ``Idempotency-Key`` to a model that keeps answers for their
    clients (``stream_grace_s`` > 0): sent to a replica, that generation runs on when its client
    leaves, its key held and its answer kept (a stream's events: gateway/idempotency/kept.py, its
    grace counted from then; a whole answer once it came), so that the retry attaches to it instead of
    running a second one. Its watch is a future that never ends (the stopping gateway still ends it)."""
    if model.stream_grace_s > 0 and "idempotency-key" in ctx.headers:
        return asyncio.get_running_loop().create_future()
    return watch
