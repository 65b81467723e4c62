"""Step 4, admit: a slot (lease) from admission, waiting in the queue while the client stays; for an
on-demand model that is not awake, one wake asked for and the wait in the shared queue at capacity zero
until a replica is ready."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from gateway.admission.base import Lease, Ticket
from gateway.errors import ClientClosedRequest, GatewayError, ModelUnavailable, NoReadyReplica, WakeTimeout
from gateway.on_demand.hold import Eta, hold_deadline_s, read_eta, scales_to_zero, too_short
from gateway.pipeline.watch import watched
from gateway.replicas.table import ModelPool
from gateway.state import Gateway
from gateway.values import RequestContext
from llmgw_contract.fleet import Model
from llmgw_contract.registry import ReplicaState

log = logging.getLogger("llmgw.proxy")


def ticket_of(ctx: RequestContext) -> Ticket:
    assert ctx.model is not None
    m, caller = ctx.model, ctx.caller
    wait = m.max_queue_wait_s if caller.max_wait_s is None else min(m.max_queue_wait_s, caller.max_wait_s)
    return Ticket(
        ctx.request_id, m.name, caller.tenant, caller.priority, ctx.cost.reserved, wait, m.max_queue
    )


async def admit(
    gw: Gateway, ctx: RequestContext, pool: ModelPool, watch: asyncio.Future[None], eta: Eta | None = None
) -> Lease:
    """The request's lease; leaves the queue at once if the client disconnects (``watch`` ends). ``eta``:
    the hold's ETA when the caller already read it (:func:`held_eta`)."""
    assert ctx.model is not None
    if not pool.candidates():
        failed = [e.record for e in pool.endpoints]
        if failed and all(r.state is ReplicaState.FAILED for r in failed):
            why = "; ".join(f"{r.id}: {r.detail or 'failed'}" for r in failed)
            raise ModelUnavailable(f"model '{ctx.model.name}' is unavailable: every replica failed ({why})")
        if ctx.model.on_demand:
            with gw.tracing.span(ctx, "wake"):
                return await admit_waking(gw, ctx, pool, watch, eta)
        raise NoReadyReplica(f"no ready replica of model '{ctx.model.name}'; retry later", retry_after=2.0)
    ticket = ticket_of(ctx)
    acquire = gw.admission.acquire(ticket, max(1, pool.capacity))
    with gw.tracing.span(ctx, "queue_wait"):
        if gw.admission.waits:
            left = "the client disconnected while the request waited for admission"
            lease, ctx.progress.wait_s = await watched(acquire, watch, left)
        else:  # admission off: a lease at once, nothing to race
            lease, ctx.progress.wait_s = await acquire
    gw.metrics.series(ticket.model).queue_wait.observe(ctx.progress.wait_s)
    return lease


async def admit_waking(
    gw: Gateway, ctx: RequestContext, pool: ModelPool, watch: asyncio.Future[None], eta: Eta | None = None
) -> Lease:
    """Ask for one wake, wait in the shared queue at capacity zero; once a replica is ready the capacity
    is raised and the queue's head granted. Past ``wake_timeout_s`` without a ready replica: 503 with
    Retry-After; sooner, once the registry has held no record of the model for ``wake_unregistered_s``
    (no supervisor lists it), unless the model may scale to zero: then no record means it is at zero,
    and the request is held (gateway/on_demand/hold.py), or refused at once when its deadline is shorter
    than the model's ETA. ``max_queue_wait_s`` starts to count once the model is awake. The granted
    lease comes back with ``ctx.progress.woken_at`` set: :func:`until_awake` confirms the replica under the
    lease's hold."""
    assert ctx.model is not None
    model, started = ctx.model, time.perf_counter()
    if eta is None and at_zero(model, pool):
        eta = await held_eta(gw, ctx)
    await gw.wakes.request(model, ctx.request_id)
    base = ticket_of(ctx)
    ticket = dataclasses.replace(base, max_wait_s=model.wake_timeout_s + base.max_wait_s)
    acquire = asyncio.ensure_future(gw.admission.acquire(ticket, 0))
    unregistered = None if scales_to_zero(model) else gw.settings.wake_unregistered_s
    awake = asyncio.ensure_future(
        gw.wakes.until_ready(pool, model.wake_timeout_s, rewake=model, unregistered_s=unregistered)
    )
    try:
        await asyncio.wait((acquire, awake, watch), return_when=asyncio.FIRST_COMPLETED)
        ready = awake.done() and awake.exception() is None and awake.result()
        if ready and not acquire.done() and not watch.done():
            await gw.admission.resize(model.name, pool.capacity)
            await asyncio.wait((acquire, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        awake.cancel()
    if not acquire.done():
        acquire.cancel()
        await asyncio.gather(acquire, return_exceptions=True)
        if watch.done() and not watch.cancelled():
            raise ClientClosedRequest("the client disconnected while the request waited for a wake")
        failed = awake.exception() if awake.done() and not awake.cancelled() else None
        if isinstance(failed, GatewayError):  # no supervisor lists the model: nobody will wake it
            raise failed
        raise wake_timeout(gw, ctx, started)
    lease, _ = acquire.result()
    ctx.progress.woken_at = started
    if eta is not None:
        held_s = time.perf_counter() - started
        gw.metrics.holds.labels(model.name).observe(held_s)
        if eta.remaining_s > 0:
            off = held_s - eta.remaining_s
            gw.metrics.hold_eta_error.labels(model.name, "late" if off > 0 else "early").observe(abs(off))
    return lease


def at_zero(model: Model, pool: ModelPool) -> bool:
    """The model may run no replica and the registry lists none: its requests are held, not refused."""
    return scales_to_zero(model) and not pool.endpoints


async def held_eta(gw: Gateway, ctx: RequestContext) -> Eta:
    """The ETA of a request held at zero (0 when no cold start was measured yet); ColdStartTooLong at
    once when the request's deadline is shorter than the ETA."""
    assert ctx.model is not None
    name = ctx.model.name
    eta = await read_eta(gw.wakes.redis, gw.wakes.keys, name)
    deadline = hold_deadline_s(ctx.model, ctx.caller)
    if eta is not None and deadline < eta.remaining_s:
        gw.metrics.hold_refused.labels(name).inc()
        log.info("request_id=%s model=%s at zero, ETA %.1f s > its deadline %g s: 503",
                 ctx.request_id, name, eta.remaining_s, deadline)  # fmt: skip
        raise too_short(name, eta, deadline)
    log.info("request_id=%s model=%s at zero replicas: held (ETA %s)", ctx.request_id, name,
             "unknown" if eta is None else f"{eta.remaining_s:.1f} s")  # fmt: skip
    return eta if eta is not None else Eta(0.0, 0.0)


async def until_awake(gw: Gateway, ctx: RequestContext, pool: ModelPool) -> None:
    """A request granted by a gateway that saw the wake first waits for its own view of a ready replica
    (within what is left of ``wake_timeout_s``); WakeTimeout past it. It asks for the wake at every look
    as a queued one does (``SET NX``: nothing while one is pending): the grant may come from a gateway
    that still counts the model's old capacity while nobody asked (the ask lost to the supervisor's
    'awoken' marker of a wake the model already slept after), and then only this request can ask."""
    assert ctx.model is not None and ctx.progress.woken_at is not None
    model, started = ctx.model, ctx.progress.woken_at
    left = model.wake_timeout_s - (time.perf_counter() - started)
    if not await gw.wakes.until_ready(pool, max(0.0, left), rewake=model):
        raise wake_timeout(gw, ctx, started)
    ctx.progress.wait_s = time.perf_counter() - started
    gw.metrics.wake_wait.labels(model.name).observe(ctx.progress.wait_s)
    gw.metrics.queue_wait.labels(model.name).observe(ctx.progress.wait_s)
    log.info("request_id=%s model=%s admitted after waiting %.2f s for the wake",
             ctx.request_id, model.name, ctx.progress.wait_s)  # fmt: skip


def wake_timeout(gw: Gateway, ctx: RequestContext, started: float) -> WakeTimeout:
    assert ctx.model is not None
    name, limit = ctx.model.name, ctx.model.wake_timeout_s
    gw.metrics.wake_timeouts.labels(name).inc()
    waited = time.perf_counter() - started
    log.warning("request_id=%s model=%s not awake after %.1f s: 503", ctx.request_id, name, waited)
    return WakeTimeout(
        f"model '{name}' is waking up and was not ready within {limit:g} s; retry later",
        retry_after=min(30.0, max(1.0, limit / 4)),
    )
