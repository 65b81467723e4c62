"""Steps 5 and 6, pick and forward: a replica chosen by the model's policy, the request sent to it; when
the replica refused it before any work (gateway/upstream/client.py: nothing was written, the connection
was refused, or it answered 502/503), another replica is tried, up to ``retry_attempts`` in all, while the
retry deadline (checked before every attempt) lasts. A request whose connection broke after it was written
is never sent again (at most one generation per request: docs/decisions/0006-generation-never-twice.md):
the client gets a 502 with ``x-should-retry: false``. A non-streamed request's total deadline starts here,
once. :func:`done` ends an attempt (the policy's hook, ejection)."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Literal

from gateway.errors import NoReadyReplica
from gateway.replicas.table import Endpoint, ModelPool
from gateway.responses_api.stored import pinned_candidates
from gateway.state import Gateway
from gateway.tracing import forward_traceparent
from gateway.upstream.client import Failed, Retryable, Unanswered, Upstream, open_stream
from gateway.values import RequestContext

log = logging.getLogger("llmgw.proxy")
Blame = Literal["eject", "strike", "none"]
EJECT: Blame = "eject"
STRIKE: Blame = "strike"
NONE: Blame = "none"


async def forward(
    gw: Gateway, ctx: RequestContext, pool: ModelPool, tried: list[Endpoint] | None = None
) -> Upstream:
    """``tried``: replicas not to pick (those of earlier runs; the attempts made here are added)."""
    s = gw.settings
    began = time.perf_counter()
    progress = ctx.progress
    progress.deadline = progress.deadline or began + s.request_timeout_s  # set once: a run again keeps it
    tried = [] if tried is None else tried
    for attempt in range(s.retry_attempts):
        if attempt and time.perf_counter() - began >= s.retry_deadline_s:
            break
        try:
            return await attempt_on(gw, ctx, pool, tried)
        except Retryable as failed:
            if failed.written and not failed.answered:  # the replica may have begun it: never again
                raise failed.error from None
            continue
    assert progress.upstream_error is not None
    raise progress.upstream_error


async def attempt_on(
    gw: Gateway,
    ctx: RequestContext,
    pool: ModelPool,
    tried: list[Endpoint],
    path: bytes | None = None,
    body: bytes | None = None,
) -> Upstream:
    """One attempt: pick among the candidates not tried yet, send (``body`` to ``path``, by default the
    request's: gateway/pipeline/body.py), wait for the answer's head."""
    progress, choices = ctx.progress, candidates(ctx, pool, tried)
    if not choices:
        if progress.upstream_error is None and ctx.holders is not None:
            raise NoReadyReplica(
                f"no ready replica of model '{pool.model}' has the adapter '{ctx.model_name}' loaded; an"
                " admin loads it again (POST /admin/lora)",
                retry_after=2.0,
            )
        raise progress.upstream_error or NoReadyReplica(
            f"no ready replica of model '{pool.model}'", retry_after=2.0
        )
    policy = gw.policies[pool.model]
    route = dataclasses.replace(ctx.route, detour=True) if tried else ctx.route  # not placed: index.py
    with gw.tracing.span(ctx, "pick"):
        ep = await policy.route(choices, route)
    if tried:
        gw.metrics.retries.labels(pool.model).inc()
    tried.append(ep)
    progress.replica, progress.attempts = ep, progress.attempts + 1
    ep.inflight += 1
    policy.on_start(ep, ctx.route)
    try:
        with gw.tracing.attempt_span(ctx, ep.id) as span:
            if progress.on_gone is not None:
                ep.watchers.add(progress.on_gone)
            try:
                up = await open_stream(
                    gw.upstream,
                    ep.url,
                    path or ctx.upstream_path,
                    ctx.body if body is None else body,
                    request_headers(ctx, forward_traceparent(ctx, span)) + gw.credentials.upstream(ep),
                    wait_s(gw, ctx),
                    ctx.api.method.encode(),
                )
            finally:  # before done() below, which may eject ep (and call its watchers)
                if progress.on_gone is not None:
                    ep.watchers.discard(progress.on_gone)
    except Retryable as failed:
        progress.upstream_error = failed.error
        done(gw, ep, ctx, ok=False, blame=STRIKE if failed.answered else EJECT)
        raise
    except Failed as failed:  # it took the request: passed through, never retried
        progress.upstream_error = failed.error
        done(gw, ep, ctx, ok=False, blame=STRIKE)
        raise failed.error from None
    except Unanswered as unanswered:
        progress.upstream_error = unanswered.error
        done(gw, ep, ctx, ok=False, blame=NONE)
        raise unanswered.error from None
    except BaseException:  # cancelled: the client left
        done(gw, ep, ctx, ok=False, blame=NONE)
        raise
    progress.first_byte_at = time.perf_counter()
    return up


def wait_s(gw: Gateway, ctx: RequestContext) -> float:
    """How long to wait for the answer's first byte: a stream's first-byte timeout; for a non-streamed
    answer (its head comes only once generation ends) what is left of the deadline."""
    if ctx.stream:
        return gw.settings.first_byte_timeout_s
    return max(0.0, ctx.progress.deadline - time.perf_counter())


def candidates(ctx: RequestContext, pool: ModelPool, tried: list[Endpoint]) -> list[Endpoint]:
    """The holder of a stored response alone; else the ready replicas (for a runtime LoRA adapter only
    those that loaded it, by replica and instance)."""
    if ctx.pinned is not None:
        return pinned_candidates(ctx, pool, tried)
    ready = pool.candidates(exclude=tried)
    if ctx.holders is not None:
        return [e for e in ready if (e.id, e.record.instance) in ctx.holders]
    return ready


def request_headers(ctx: RequestContext, traceparent: str) -> list[tuple[bytes, bytes]]:
    """Only what the replica needs (the trace context, when the request has one): hop-by-hop headers
    and the client's credentials stay here."""
    headers = [
        (b"content-type", ctx.content_type.encode("latin-1")),
        (b"x-request-id", ctx.progress.upstream_id.encode()),
    ]
    if traceparent:
        headers.append((b"traceparent", traceparent.encode()))
    if ctx.tracestate:
        headers.append((b"tracestate", ctx.tracestate.encode("latin-1")))
    return headers


def done(gw: Gateway, ep: Endpoint, ctx: RequestContext, ok: bool, blame: Blame = EJECT) -> None:
    """The attempt on ``ep`` ended; a failure the replica is to blame for ejects it (``EJECT``: it did
    not answer) or counts toward its run of server errors (``STRIKE``)."""
    ep.inflight -= 1
    gw.policies[ep.record.model].on_finish(ep, ctx.route, ok)
    if ok and (ep.failures or ep.strikes):  # it answered: back at once, without its half-open probe
        if ep.failures:
            log.info("request_id=%s replica=%s back: it answered a request", ctx.request_id, ep.id)
        gw.ejection.succeed(ep)
    if ok or blame == NONE:
        return
    now = time.monotonic()
    if gw.ejection.strike(ep, now) if blame == STRIKE else gw.ejection.fail(ep, now):
        gw.metrics.ejections.labels(ep.record.model, ep.id).inc()
        failed = ctx.progress.upstream_error
        reason = ctx.progress.error or (failed.message if failed else "failure")
        log.warning("request_id=%s replica=%s ejected: %s", ctx.request_id, ep.id, reason)
