"""The request path: the named steps in order, with retry only while no replica may be running the
request, a total deadline for a non-streamed request, and a planned end for a stream that breaks
after it started."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from redis.exceptions import RedisError
from starlette.responses import Response
from starlette.types import Receive, Scope

from gateway.admission.base import Lease, Ticket
from gateway.affinity import response_id_in
from gateway.context import RequestContext
from gateway.endpoints import Route
from gateway.errors import (
    BodyTooLarge,
    ClientClosedRequest,
    GatewayError,
    InternalError,
    NoReadyReplica,
    ShuttingDown,
    WakeTimeout,
    error_response,
    sse_error_event,
)
from gateway.one_write import GONE
from gateway.pool import Endpoint, ModelPool
from gateway.responses import RelayResponse, WholeResponse
from gateway.state import Gateway
from gateway.steps.finish import finish, stream_usage, usage_of
from gateway.steps.parse import parse
from gateway.steps.resolve import resolve
from gateway.steps.stored import locate, pinned_candidates
from gateway.steps.tokens import reserve, unused
from gateway.steps.usage import UsageStrip
from gateway.tracing import forward_traceparent
from gateway.upstream import (
    FAILURES,
    Retryable,
    Unanswered,
    Upstream,
    classify,
    next_chunk,
    open_stream,
    read_rest,
)

log = logging.getLogger("llmgw.proxy")
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


# The request headers any step reads; the rest are never looked at (nor forwarded).
WANTED_HEADERS = frozenset(
    {
        b"authorization",
        b"x-api-key",
        b"content-type",
        b"x-request-id",
        b"x-session-id",
        b"x-priority",
        b"x-max-wait-s",
        b"x-stainless-retry-count",
        b"traceparent",
        b"tracestate",
    }
)


def wanted_headers(scope: Scope) -> dict[str, str]:
    return {k.decode(): v.decode("latin-1") for k, v in scope["headers"] if k in WANTED_HEADERS}


def request_id(headers: dict[str, str]) -> str:
    given = headers.get("x-request-id", "")
    if 0 < len(given) <= 128 and given.isprintable() and given.isascii():
        return given
    return os.urandom(16).hex()


def upstream_id(request_id: str, headers: dict[str, str]) -> str:
    """The id vLLM gets for the request: unique per gateway request, since vLLM uses it as its internal
    request id (two in flight with the same id collide). A client's id is kept readable (its first 64
    characters, anything but letters, digits and ``._:-`` as ``_``) with a random suffix; an id the
    gateway made is unique already."""
    if headers.get("x-request-id") != request_id:
        return request_id
    safe = "".join(c if c.isalnum() or c in "._:-" else "_" for c in request_id[:64])
    return f"{safe}-{os.urandom(6).hex()}"


async def read_body(receive: Receive, limit: int) -> bytes:
    """The request body, refused as soon as it passes the limit (never buffered past it)."""
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientClosedRequest("the client disconnected while sending the request")
        body = message.get("body", b"")
        size += len(body)
        if size > limit:
            raise BodyTooLarge(f"request body is over the limit of {limit} bytes")
        parts.append(body)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


async def disconnected(receive: Receive) -> None:
    """Returns when the client has gone away (the body was already read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class Proxy:
    """Serves every path of the allow-list (gateway/endpoints.py) for one gateway."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    async def respond(self, scope: Scope, receive: Receive, api: Route, response_id: str = "") -> Response:
        """The whole request path for one request; always returns a response, never raises."""
        headers = wanted_headers(scope)
        ctx = RequestContext(request_id(headers), api.name, b"", headers, time.perf_counter())
        ctx.api, ctx.response_id = api, response_id
        ctx.upstream_id = upstream_id(ctx.request_id, headers)
        self.gw.tracing.begin(ctx, headers.get("traceparent", ""), headers.get("tracestate", ""))
        try:
            ctx.body = await read_body(receive, self.gw.settings.max_body_bytes)
            return await self._serve(ctx, receive, scope.get(GONE))
        except GatewayError as err:
            await self._settle(ctx, 0, 0)
            return self._fail(ctx, err)
        except Exception:
            log.exception("request_id=%s unexpected error", ctx.request_id)
            await self._settle(ctx, 0, 0)
            return self._fail(ctx, InternalError("the gateway failed to serve this request"))

    def _fail(self, ctx: RequestContext, err: GatewayError) -> Response:
        ctx.status, ctx.error = err.status, err.message
        finish(ctx, self.gw.metrics)
        response = error_response(err, ctx.api.dialect)
        response.headers["x-request-id"] = ctx.request_id
        return response

    async def _serve(
        self, ctx: RequestContext, receive: Receive, gone: asyncio.Future[None] | None = None
    ) -> Response:
        gw = self.gw
        with gw.tracing.span(ctx, "authenticate"):
            ctx.caller = await gw.auth.authenticate(ctx.headers)
        parse(ctx, gw.settings.prefix_chars, gw.settings.prefix_chunk_bytes, gw.settings.prefix_max_chunks)
        await locate(ctx, gw.names, gw.affinity)
        model = resolve(ctx, gw.names, gw.lora.adapters)
        ctx.cost = reserve(ctx.cost.prompt, ctx.asked, model.engine.max_model_len)
        ctx.charge = await gw.auth.charge(ctx.caller, model.name, ctx.cost)
        pool = gw.table.pool(model.name)
        # one watch from admission to the answer: the server's own disconnect future (gateway/one_write.py)
        # or a task reading ``receive``
        watch = gone if gone is not None else asyncio.ensure_future(disconnected(receive))
        try:
            if pool.candidates():
                with gw.tracing.span(ctx, "queue_wait"):
                    lease = await self._admit(ctx, pool, watch)
            elif model.on_demand:
                with gw.tracing.span(ctx, "wake"):
                    lease = await self._admit_waking(ctx, pool, watch)
            else:
                raise NoReadyReplica(
                    f"no ready replica of model '{model.name}'; retry later", retry_after=2.0
                )
            return await self._until_disconnect(self._run(ctx, pool, lease), watch)
        finally:
            if watch is not gone:
                watch.cancel()

    async def _settle(
        self, ctx: RequestContext, prompt: int, completion: int, lease: Lease | None = None
    ) -> None:
        """Refund what the request reserved but did not use, once, from its usage (zeros: nothing
        generated, e.g. a failure): to its key's tokens per minute and, through its ``lease``, to its
        tenant's fair-share tag; its prompt estimate stands in for a usage without prompt."""
        if lease is not None:
            await lease.refund(unused(ctx.cost.reserved, ctx.cost, prompt, completion))
        charge, ctx.charge = ctx.charge, None
        if charge is not None:
            await self.gw.auth.refund(ctx.caller, charge, unused(charge.tokens, ctx.cost, prompt, completion))

    async def _run(self, ctx: RequestContext, pool: ModelPool, lease: Lease) -> Response:
        """Steps 5 to 7 for an admitted request: the lease is released whatever happens."""
        try:
            up = await self._forward(ctx, pool)
        except BaseException:
            await lease.release()
            await self._settle(ctx, 0, 0, lease)
            raise
        return await self._respond(ctx, up, lease)

    async def _until_disconnect(
        self, work: Coroutine[Any, Any, Response], watch: asyncio.Future[None]
    ) -> Response:
        """Run ``work`` while watching the client: if it leaves first (``watch`` ends; a non-streamed
        answer comes only once generation ends), ``work`` is cancelled, which closes the upstream
        connection (vLLM aborts the request) and releases the lease. The same happens, with a 503 for
        the client, when a stopping gateway ends its open requests. A started stream is watched by its
        response."""
        current = asyncio.current_task()
        assert current is not None
        why: list[GatewayError] = []
        over = False

        def end(reason: GatewayError) -> None:
            if not why and not over:  # a callback already scheduled may run after the work ended
                why.append(reason)
                current.cancel()

        def gone(_: asyncio.Future[None]) -> None:
            end(ClientClosedRequest("the client disconnected before the answer was ready"))

        watch.add_done_callback(gone)
        token = self.gw.open_requests.open(
            lambda: end(ShuttingDown("the gateway is shutting down; retry the request", retry_after=1.0))
        )
        try:
            return await work
        except asyncio.CancelledError:
            if not why or current.uncancel() > 0:  # cancelled from outside too: let that through
                raise
            raise why[0] from None
        finally:
            over = True
            watch.remove_done_callback(gone)
            self.gw.open_requests.close(token)

    @staticmethod
    def _ticket(ctx: RequestContext) -> Ticket:
        assert ctx.model is not None
        m, caller = ctx.model, ctx.caller
        wait = m.max_queue_wait_s if caller.max_wait_s is None else min(m.max_queue_wait_s, caller.max_wait_s)
        cost = ctx.cost.reserved
        return Ticket(ctx.request_id, m.name, caller.tenant, caller.priority, cost, wait, m.max_queue)

    async def _admit(self, ctx: RequestContext, pool: ModelPool, watch: asyncio.Future[None]) -> Lease:
        """Step 4, admit: wait for a slot, leaving the queue at once if the client disconnects
        (``watch`` ends)."""
        ticket = self._ticket(ctx)
        if self.gw.admission.waits:
            lease, ctx.wait_s = await self._acquire(ticket, pool, watch)
        else:  # admission off: a lease at once, nothing to race
            lease, ctx.wait_s = await self.gw.admission.acquire(ticket, max(1, pool.capacity))
        self.gw.metrics.series(ticket.model).queue_wait.observe(ctx.wait_s)
        return lease

    async def _acquire(
        self, ticket: Ticket, pool: ModelPool, watch: asyncio.Future[None]
    ) -> tuple[Lease, float]:
        """A slot from the queue, leaving it at once if the client disconnects first: the watch
        cancels this task (acquire is cancellation-safe), which becomes a ClientClosedRequest; no task
        of its own per acquire."""
        current = asyncio.current_task()
        assert current is not None
        closed = over = False

        def gone(_: asyncio.Future[None]) -> None:
            nonlocal closed
            if not closed and not over:  # a callback scheduled before the acquire ended may run after
                closed = True
                current.cancel()

        watch.add_done_callback(gone)
        try:
            return await self.gw.admission.acquire(ticket, max(1, pool.capacity))
        except asyncio.CancelledError:
            if not closed or current.uncancel() > 0:  # cancelled from outside too: let that through
                raise
            raise ClientClosedRequest(
                "the client disconnected while the request waited for admission"
            ) from None
        finally:
            over = True
            watch.remove_done_callback(gone)

    async def _admit_waking(self, ctx: RequestContext, pool: ModelPool, watch: asyncio.Future[None]) -> Lease:
        """Step 4 for an on-demand model that is not awake: ask for one wake, wait in the shared queue
        at capacity zero; once a replica is ready the capacity is raised and the queue's head granted.
        Past ``wake_timeout_s`` without a ready replica: 503 with Retry-After. ``max_queue_wait_s``
        starts to count once the model is awake."""
        assert ctx.model is not None
        gw, model, started = self.gw, ctx.model, time.perf_counter()
        await gw.wakes.request(model, ctx.request_id)
        base = self._ticket(ctx)
        ticket = dataclasses.replace(base, max_wait_s=model.wake_timeout_s + base.max_wait_s)
        acquire = asyncio.ensure_future(gw.admission.acquire(ticket, 0))
        awake = asyncio.ensure_future(gw.wakes.until_ready(pool, model.wake_timeout_s, rewake=model))
        try:
            await asyncio.wait((acquire, awake, watch), return_when=asyncio.FIRST_COMPLETED)
            if awake.done() and awake.result() and not acquire.done() and not watch.done():
                await gw.admission.resize(model.name, pool.capacity)
                await asyncio.wait((acquire, watch), return_when=asyncio.FIRST_COMPLETED)
        finally:
            awake.cancel()
        if not acquire.done():
            acquire.cancel()
            await asyncio.gather(acquire, return_exceptions=True)
            if watch.done() and not watch.cancelled():
                raise ClientClosedRequest("the client disconnected while the request waited for a wake")
            raise self._wake_timeout(ctx, started)
        lease, _ = acquire.result()
        left = model.wake_timeout_s - (time.perf_counter() - started)
        try:
            ready = await gw.wakes.until_ready(pool, max(0.0, left))  # granted by a gateway that saw it first
        except BaseException:
            await lease.release()
            raise
        if not ready:
            await lease.release()
            raise self._wake_timeout(ctx, started)
        ctx.wait_s = time.perf_counter() - started
        gw.metrics.wake_wait.labels(model.name).observe(ctx.wait_s)
        gw.metrics.queue_wait.labels(model.name).observe(ctx.wait_s)
        log.info("request_id=%s model=%s admitted after waiting %.2f s for the wake",
                 ctx.request_id, model.name, ctx.wait_s)  # fmt: skip
        return lease

    def _wake_timeout(self, ctx: RequestContext, started: float) -> WakeTimeout:
        assert ctx.model is not None
        name, limit = ctx.model.name, ctx.model.wake_timeout_s
        self.gw.metrics.wake_timeouts.labels(name).inc()
        waited = time.perf_counter() - started
        log.warning("request_id=%s model=%s not awake after %.1f s: 503", ctx.request_id, name, waited)
        return WakeTimeout(
            f"model '{name}' is waking up and was not ready within {limit:g} s; retry later",
            retry_after=min(30.0, max(1.0, limit / 4)),
        )

    async def _forward(self, ctx: RequestContext, pool: ModelPool) -> Upstream:
        """Step 5 and 6, pick and forward; on a retryable failure another replica is tried, up to
        ``retry_attempts`` in all, while the retry deadline (checked before every attempt) lasts.
        A non-streamed request's total deadline starts here."""
        s = self.gw.settings
        began = time.perf_counter()
        ctx.deadline = began + s.request_timeout_s
        tried: list[Endpoint] = []
        for attempt in range(s.retry_attempts):
            if attempt and time.perf_counter() - began >= s.retry_deadline_s:
                break
            try:
                return await self._attempt(ctx, pool, tried)
            except Retryable:
                continue
        assert ctx.upstream_error is not None
        raise ctx.upstream_error

    async def _attempt(self, ctx: RequestContext, pool: ModelPool, tried: list[Endpoint]) -> Upstream:
        gw = self.gw
        candidates = self._candidates(ctx, pool, tried)
        if not candidates:
            raise ctx.upstream_error or NoReadyReplica(
                f"no ready replica of model '{pool.model}'", retry_after=2.0
            )
        policy = gw.policies[pool.model]
        with gw.tracing.span(ctx, "pick"):
            ep = await policy.route(candidates, ctx.route)
        if tried:
            gw.metrics.retries.labels(pool.model).inc()
        tried.append(ep)
        ctx.replica, ctx.attempts = ep, ctx.attempts + 1
        ep.inflight += 1
        policy.on_start(ep, ctx.route)
        step = "retry" if ctx.attempts > 1 else "forward"
        try:
            with gw.tracing.span(
                ctx, step, **{"llmgw.replica": ep.id, "llmgw.attempt": ctx.attempts}
            ) as span:
                up = await open_stream(
                    gw.upstream,
                    ep.url,
                    self._path(ctx),
                    ctx.body,
                    self._headers(ctx, forward_traceparent(ctx, span)) + gw.credentials.upstream(ep),
                    self._wait_s(ctx),
                    ctx.api.method.encode(),
                )
        except Retryable as failed:
            ctx.upstream_error = failed.error
            self._done(ep, ctx, ok=False)
            raise
        except Unanswered as unanswered:
            ctx.upstream_error = unanswered.error
            self._done(ep, ctx, ok=False, blame=False)
            raise unanswered.error from None
        except BaseException:  # cancelled: the client left
            self._done(ep, ctx, ok=False, blame=False)
            raise
        ctx.first_byte_at = time.perf_counter()
        return up

    def _wait_s(self, ctx: RequestContext) -> float:
        """How long to wait for the answer's first byte: a stream's first-byte timeout; for a
        non-streamed answer (its head comes only once generation ends) what is left of the deadline."""
        if ctx.stream:
            return self.gw.settings.first_byte_timeout_s
        return max(0.0, ctx.deadline - time.perf_counter())

    @staticmethod
    def _candidates(ctx: RequestContext, pool: ModelPool, tried: list[Endpoint]) -> list[Endpoint]:
        """The holder of a stored response alone; else the ready replicas, those that loaded the
        requested runtime LoRA adapter first."""
        if ctx.pinned is not None:
            return pinned_candidates(ctx, pool, tried)
        candidates = pool.candidates(exclude=tried)
        if ctx.preferred:
            return [e for e in candidates if e.id in ctx.preferred] or candidates
        return candidates

    @staticmethod
    def _path(ctx: RequestContext) -> bytes:
        return ctx.upstream_path

    @staticmethod
    def _headers(ctx: RequestContext, traceparent: str) -> list[tuple[bytes, bytes]]:
        """Only what the replica needs (the trace context too): hop-by-hop headers and the client's
        credentials stay here."""
        headers = [
            (b"content-type", ctx.content_type.encode("latin-1")),
            (b"x-request-id", ctx.upstream_id.encode()),
            (b"traceparent", traceparent.encode()),
        ]
        if ctx.tracestate:
            headers.append((b"tracestate", ctx.tracestate.encode("latin-1")))
        return headers

    async def _remember(self, ctx: RequestContext, data: bytes) -> bool:
        """Record which replica made a stored response (by the id in ``data``); True once recorded or
        when there is nothing to record, False while the id has not been seen yet."""
        assert ctx.replica is not None and ctx.model is not None
        if ctx.api.stored != "create" or ctx.status != 200 or not ctx.model.engine.responses_store:
            return True
        rid = response_id_in(data)
        if not rid:
            return False
        try:
            await self.gw.affinity.record(ctx.model.name, rid, (ctx.replica.id, ctx.replica.record.instance))
        except (RedisError, OSError) as exc:
            log.warning("request_id=%s response=%s holder not recorded (Redis: %s)", ctx.request_id, rid, exc)
        return True

    def _done(self, ep: Endpoint, ctx: RequestContext, ok: bool, blame: bool = True) -> None:
        """The attempt on ``ep`` ended; a failure the replica is to blame for counts toward ejection."""
        ep.inflight -= 1
        self.gw.policies[ep.record.model].on_finish(ep, ctx.route, ok)
        if ok and ep.failures:  # it answered: back at once, without waiting for its half-open probe
            self.gw.ejection.succeed(ep)
            log.info("request_id=%s replica=%s back: it answered a request", ctx.request_id, ep.id)
        if ok or not blame:
            return
        if self.gw.ejection.fail(ep, time.monotonic()):
            self.gw.metrics.ejections.labels(ep.record.model, ep.id).inc()
            reason = ctx.error or (ctx.upstream_error.message if ctx.upstream_error else "failure")
            log.warning("request_id=%s replica=%s ejected: %s", ctx.request_id, ep.id, reason)

    async def _respond(self, ctx: RequestContext, up: Upstream, lease: Lease) -> Response:
        ctx.status = up.status
        streaming = ctx.stream and ctx.status == 200
        if not streaming:
            return await self._whole(ctx, up, lease)
        headers = {**SSE_HEADERS, "x-request-id": ctx.request_id}
        return RelayResponse(self._relay(ctx, up, lease), 200, headers, media_type="text/event-stream")

    async def _whole(self, ctx: RequestContext, up: Upstream, lease: Lease) -> Response:
        assert ctx.replica is not None
        ok, blame = True, True
        wait_s = self._wait_s(ctx) if not ctx.stream else self.gw.settings.chunk_timeout_s
        try:
            body = await read_rest(up, wait_s, ctx.replica.url)
        except (Retryable, Unanswered) as failed:
            ok, blame = False, isinstance(failed, Retryable)
            raise failed.error from None
        except BaseException:  # cancelled: the client left
            ok, blame = False, False
            raise
        finally:
            self._done(ctx.replica, ctx, ok, blame)
            await lease.release()
        await self._remember(ctx, body[:4096])
        prompt, completion = usage_of(body)
        await self._settle(ctx, prompt, completion, lease)
        finish(ctx, self.gw.metrics, prompt, completion)
        return WholeResponse(body, ctx.status, ctx.request_id, up.content_type)

    async def _relay(self, ctx: RequestContext, up: Upstream, lease: Lease) -> AsyncIterator[bytes]:
        assert ctx.replica is not None and ctx.model is not None
        itl = self.gw.metrics.itl.labels(ctx.model.name)
        events, tail, ok, blame, ended = 0, b"", True, True, False
        recorded = ctx.api.stored != "create"
        strip = UsageStrip() if ctx.strip_usage else None

        def end() -> None:  # the gateway is stopping: break the stream to give it its planned end
            nonlocal ended
            ended = True
            up.response.close()

        token = self.gw.open_requests.open(end)
        try:
            chunk, t = up.first, time.perf_counter()
            while chunk:
                events += chunk.count(b"data: ")
                tail = tail[-4096:] + chunk
                recorded = recorded or events > 8 or await self._remember(ctx, tail)
                out = chunk if strip is None else strip.feed(chunk)
                if out:  # the usage event alone: nothing to send
                    yield out
                chunk = await next_chunk(up, self.gw.settings.chunk_timeout_s)
                now = time.perf_counter()
                itl.observe(now - t)
                t = now
            if strip is not None and strip.pending:
                yield strip.rest()
        except FAILURES as exc:
            # a stall is not the replica's failure (it may be busy; a frozen one fails its /health)
            ok, blame = False, not ended and not isinstance(exc, TimeoutError)
            err = self._stream_error(exc, ctx.replica.url, ended)
            ctx.error = f"stream broke after it started: {err.message}"
            self.gw.metrics.stream_errors.labels(ctx.model.name).inc()
            rest = strip.rest() if strip is not None else b""
            yield rest + event_end(tail) + sse_error_event(err, ctx.api.dialect)
        finally:
            self.gw.open_requests.close(token)
            up.response.close()
            self._done(ctx.replica, ctx, ok, blame)
            await lease.release()
            prompt, completion = stream_usage(tail)
            completion = completion or max(0, events - 1)
            await self._settle(ctx, prompt, completion, lease)
            finish(ctx, self.gw.metrics, prompt, completion)

    @staticmethod
    def _stream_error(exc: BaseException, url: str, ended: bool) -> GatewayError:
        if ended:
            return ShuttingDown("the gateway is shutting down; the stream was ended, retry the request")
        return classify(exc, url).error


def event_end(sent: bytes) -> bytes:
    """What ends the SSE event the relayed bytes stopped in (nothing after a blank line), so that an
    error event is never glued onto half an event."""
    if not sent or sent.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")):
        return b""
    if sent.endswith((b"\n", b"\r")):
        return b"\n"
    return b"\n\n"
