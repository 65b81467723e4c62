"""Admission shared by every gateway replica through Redis: leases, a fair priority queue, hand-over.

Acquire, release, leave (cancel/timeout) and the periodic renew-and-reclaim step are atomic Lua scripts
(``lua/*.lua``; the order they keep is :mod:`gateway.admission.order`). A waiter blocks on its own wake
list (BLPOP, on a separate connection pool) with a timeout equal to its remaining wait; the release that
frees a slot grants it to the head of the queue and pushes to that waiter's list, so nobody polls.

Ownership of a slot lives in Redis only (the leases set, keyed by ticket id): whatever happens to an
acquire (cancelled, timed out, a lost reply), the leave script settles it atomically.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import redis
import redis.asyncio as aioredis

from gateway.admission.base import AdmissionUnavailable, Ticket
from gateway.admission.liveness import StampTiming
from gateway.admission.queue_scripts import (
    RENEWS_PER_TTL,
    Acquired,
    Left,
    QueueScripts,
    instance_id,
    ticket_id,
)
from gateway.admission.redis_cluster_wire import lean_client
from gateway.admission.redis_lease import RedisLease
from gateway.admission.redis_wire import PipelinedRedis, Reply
from gateway.admission.resp import awaited_call_needed
from gateway.admission.stamp_renewer import StampRenewer
from gateway.admission.unreleased import Unreleased
from gateway.errors import QueueFull, QueueTimeout
from gateway.metrics import GatewayMetrics
from gateway.periodic import Background
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import REDIS_DOWN

log = logging.getLogger("llmgw.admission")
T = TypeVar("T")
# Without the renewing thread (liveness.py), a presence stamp holds four beats, so that a stalled loop keeps
# its leases (at two beats a loaded 2-core machine saw a model run at 12 of 4 slots).
PRESENCE_BEATS = 4


async def guarded(aw: Awaitable[T]) -> T:
    """A Redis call whose failure means 'the shared queue is unreachable'."""
    try:
        return await aw
    except REDIS_DOWN as exc:
        raise AdmissionUnavailable(f"{type(exc).__name__}: {exc}") from exc


class RedisAdmission:
    """The shared queue. Raises AdmissionUnavailable when Redis cannot be reached (see fallback.py)."""

    waits = True

    def __init__(
        self,
        redis: aioredis.Redis,
        blocking: aioredis.Redis,
        keys: RedisKeys,
        gateway_id: str,
        lease_ttl_s: float,
        metrics: GatewayMetrics | None = None,
        io_timeout_s: float = 1.0,
        beat_s: float = 1.0,
        presence: Callable[[], redis.Redis] | None = None,
    ) -> None:
        """``presence``: builds the synchronous client of the thread that renews the presence stamps.
        Tickets, leases and presence stamps name this process, :attr:`instance` (``<gateway id>/<boot
        nonce>``), never the gateway id alone, which a restarted gateway reuses."""
        self.redis, self.blocking, self.keys = redis, blocking, keys
        self.gateway_id, self.lease_ttl_s, self.metrics = gateway_id, lease_ttl_s, metrics
        self.instance = instance_id(gateway_id)
        self.io_timeout_s, self.beat_s = io_timeout_s, beat_s
        self.lean: PipelinedRedis = lean_client(redis, io_timeout_s)
        timing = StampTiming(beat_s)
        self.renewer = (
            StampRenewer(presence, keys, self.instance, timing, self._count_failure) if presence else None
        )
        presence_ms = timing.stamp_ms if self.renewer else int(PRESENCE_BEATS * beat_s * 1000)
        self.scripts = QueueScripts(self.lean, keys, int(lease_ttl_s * 1000), presence_ms)
        self._held: dict[str, set[str]] = {}
        self._capacity: dict[str, int] = {}
        self._cleanups: set[asyncio.Task[None]] = set()
        self._releases: set[asyncio.Future[Reply]] = set()  # sent without a task (release_nowait)
        self._unreleased = Unreleased(lease_ttl_s)  # sent again by the beat once Redis answers
        self._bg: Background | None = None

    @property
    def degraded(self) -> bool:
        return False

    @property
    def renew_interval_s(self) -> float:
        return self.lease_ttl_s / RENEWS_PER_TTL

    def held(self, model: str) -> frozenset[str]:
        return frozenset(self._held.get(model, ()))

    async def start(self) -> None:
        """Renewal in the background; the pipelined connection opened now, so that a burst of first
        requests does not wait on its opening (Redis down here: the first call tries again)."""
        with contextlib.suppress(*REDIS_DOWN):
            await self.lean.connect()
        self._bg = Background(failed=lambda task, _: self._count_failure(task))
        self._bg.start(self.renew_interval_s, self.tick)
        self._bg.start(self.beat_s, self.beat)
        if self.renewer is not None:
            self.renewer.start(self._bg)

    def _count_failure(self, task: str) -> None:
        if self.metrics is not None:
            self.metrics.task_failures.labels(task).inc()

    def _see(self, model: str, capacity: int) -> None:
        """Use ``capacity`` for the model; a model seen for the first time gets its stamps renewed."""
        new, self._capacity[model] = model not in self._capacity, capacity
        if new and self.renewer is not None:
            self.renewer.watch(self._capacity.keys())

    async def ping(self) -> None:
        """One PING on the pipelined connection: a silent one is closed here (and replaced on the next
        call); raises one of ``REDIS_DOWN`` when Redis does not answer."""
        await self.lean.call("PING")

    async def stop(self) -> None:
        if self._bg is not None:
            await self._bg.close()
        if self.renewer is not None:
            await self.renewer.close()
        await self._release_all()
        await self.drain(2 * self._io_budget)
        await self.blocking.aclose()
        await self.redis.aclose()
        self.lean.close()

    async def acquire(self, ticket: Ticket, capacity: int) -> tuple[RedisLease, float]:
        started = time.monotonic()
        lease_id = ticket_id(self.instance, os.urandom(16).hex())
        self._see(ticket.model, capacity)
        try:
            queued = await self._admit(ticket, lease_id, capacity, started)
        except asyncio.CancelledError:
            log.info("request_id=%s model=%s left the queue: cancelled", ticket.request_id, ticket.model)
            await self._settle(ticket.model, lease_id, capacity)
            raise
        except AdmissionUnavailable:
            self._spawn(self._leave_quietly(ticket.model, lease_id, capacity))
            raise
        self._held.setdefault(ticket.model, set()).add(lease_id)
        tagged = max(1, ticket.cost) if queued else 0
        lease = RedisLease(self, ticket.model, lease_id, ticket.tenant, tagged)
        return lease, time.monotonic() - started

    async def _admit(
        self, t: Ticket, lease_id: str, capacity: int, started: float, requeued: bool = False
    ) -> bool:
        """Granted (False: at once, no fair-share tag charged; True: after queueing, tag charged once)."""
        status, depth = await guarded(self.scripts.acquire(t, lease_id, capacity, requeued))
        self._set_depth(t.model, depth)
        if status is Acquired.GRANTED:
            return False
        if status is Acquired.FULL:
            log.info("request_id=%s model=%s refused: queue full (%d waiting)", t.request_id, t.model, depth)
            raise QueueFull(
                f"the queue for model '{t.model}' is full ({depth} waiting, limit {t.max_queue});"
                " retry later",
                retry_after=1.0,
            )
        if status is Acquired.GONE:  # pragma: no cover - a fresh ticket id is never tombstoned
            raise RuntimeError(f"ticket {lease_id} was tombstoned before it was queued")
        log.debug("request_id=%s model=%s queued at depth %d", t.request_id, t.model, depth)
        await self._wait(t, lease_id, capacity, started)
        if await guarded(self.scripts.claim(t.model, lease_id)):
            return True
        log.warning(
            "request_id=%s model=%s its grant was reclaimed before it was picked up; queueing again",
            t.request_id,
            t.model,
        )
        return await self._admit(t, lease_id, capacity, started, requeued=True)

    async def _wait(self, t: Ticket, lease_id: str, capacity: int, started: float) -> None:
        wake = self.keys.wake(t.model, lease_id)
        deadline = started + t.max_wait_s
        while (remaining := deadline - time.monotonic()) > 0:
            if await self._blpop(wake, remaining):
                return
        if await guarded(self.scripts.leave(t.model, lease_id, True, capacity)) is Left.KEPT:
            return
        waited = time.monotonic() - started
        log.info("request_id=%s model=%s refused: waited %.1f s", t.request_id, t.model, waited)
        raise QueueTimeout(
            f"waited {waited:.1f} s in the queue for model '{t.model}' without getting a slot"
            f" (limit {t.max_wait_s:g} s); retry later",
            retry_after=1.0,
        )

    async def _blpop(self, wake: str, remaining: float) -> bool:
        """True when woken by a grant; False when the wait ran out. A local timeout (a hung server, or
        every blocking connection busy) also reads as 'ran out': the leave script then settles it, and
        fails if Redis is really gone. A broken connection means Redis is gone: fall back at once."""
        timeout = max(0.01, remaining)
        try:
            popped = await asyncio.wait_for(self.blocking.blpop([wake], timeout), timeout + self.io_timeout_s)
        except TimeoutError:
            return False
        except REDIS_DOWN as exc:
            raise AdmissionUnavailable(f"blocking read failed: {type(exc).__name__}: {exc}") from exc
        return popped is not None

    async def _settle(self, model: str, lease_id: str, capacity: int) -> None:
        """After a cancelled acquire: leave the queue, or pass on a slot granted meanwhile (shielded)."""
        task = self._spawn(self._leave_quietly(model, lease_id, capacity))
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task)

    async def _leave_quietly(self, model: str, lease_id: str, capacity: int) -> None:
        try:
            leave = self.scripts.leave(model, lease_id, False, capacity)
            outcome = await asyncio.wait_for(leave, self._io_budget)
        except REDIS_DOWN as exc:
            why = "model=%s ticket=%s could not leave the queue (%s); its deadline drops it"
            log.warning(why, model, lease_id, exc)
            return
        if outcome is Left.PASSED_ON:
            log.info(
                "model=%s ticket=%s was granted as it left; the slot went to the next waiter", model, lease_id
            )

    async def release(self, model: str, lease_id: str) -> None:
        """Gives the slot back in the background (the client does not wait for Redis, a cancelled caller
        cannot cut it short; ``drain()`` waits): sent at once, its reply handled by a callback; before the
        connection is open, or when Redis lacks the script, by a task. A failed one is sent again later."""
        self._held.get(model, set()).discard(lease_id)
        capacity = self._capacity.get(model, 1)
        reply = self.scripts.release_nowait(model, lease_id, capacity, self._io_budget)
        if reply is None:
            self._spawn(self._release_quietly(model, lease_id))
            return
        self._releases.add(reply)
        reply.add_done_callback(functools.partial(self._released, model, lease_id))

    def _released(self, model: str, lease_id: str, reply: asyncio.Future[Reply]) -> None:
        self._releases.discard(reply)
        exc = None if reply.cancelled() else reply.exception()
        if awaited_call_needed(exc):
            self._spawn(self._release_quietly(model, lease_id))
        elif exc is not None:
            self._unreleased.failed(model, lease_id, exc)

    def refund(self, model: str, tenant: str, tokens: int) -> None:
        """Give ``tokens`` back to ``tenant``'s fair-share tag, in the background (``drain()`` waits)."""
        self._spawn(self._refund_quietly(model, tenant, tokens))

    async def _refund_quietly(self, model: str, tenant: str, tokens: int) -> None:
        try:
            await asyncio.wait_for(self.scripts.refund(model, tenant, tokens), self._io_budget)
        except REDIS_DOWN as exc:
            log.warning(
                "model=%s tenant=%s fair-share refund of %d tokens lost (%s)", model, tenant, tokens, exc
            )

    async def drain(self, timeout_s: float | None = None) -> None:
        """Wait for the releases and queue exits still running in the background."""
        if self._releases:
            await asyncio.wait(list(self._releases), timeout=timeout_s)
        if self._cleanups:
            await asyncio.wait(list(self._cleanups), timeout=timeout_s)

    async def _release_quietly(self, model: str, lease_id: str) -> None:
        try:
            await self._send_release(model, lease_id)
        except REDIS_DOWN as exc:
            self._unreleased.failed(model, lease_id, exc)

    async def _send_release(self, model: str, lease_id: str) -> None:
        release = self.scripts.release(model, lease_id, self._capacity.get(model, 1))
        await asyncio.wait_for(release, self._io_budget)

    async def _release_all(self) -> None:
        held = [(model, lease_id) for model, ids in self._held.items() for lease_id in ids]
        await asyncio.gather(*(self.release(model, lease_id) for model, lease_id in held))

    @property
    def _io_budget(self) -> float:
        return 3 * self.io_timeout_s

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        return task

    def _set_depth(self, model: str, depth: int) -> None:
        if self.metrics is not None:
            self.metrics.depth_of(model).set(depth)

    async def resize(self, model: str, capacity: int) -> None:
        """Use ``capacity`` for the model from now on and grant what it frees to the queue's head now."""
        self._see(model, capacity)
        await guarded(self._tick_model(model, capacity))

    async def tick(self) -> None:
        """Renew this gateway's leases and reclaim/hand over expired ones, for every model seen."""
        for model, capacity in list(self._capacity.items()):
            try:
                await self._tick_model(model, capacity)
            except REDIS_DOWN as exc:
                log.debug("model=%s lease renewal failed: %s", model, exc)

    async def beat(self) -> None:
        """Stamp this instance present for every model seen; the script drops what absent instances left
        behind (their waiters and leases) and grants the slots that freed; releases that failed first."""
        await self._unreleased.resend(self._send_release, REDIS_DOWN)
        for model, capacity in list(self._capacity.items()):
            try:
                beat = self.scripts.beat(model, self.instance, capacity)
                depth, _active, dropped = await asyncio.wait_for(beat, self._io_budget)
            except REDIS_DOWN as exc:
                log.debug("model=%s presence beat failed: %s", model, exc)
                continue
            self._set_depth(model, depth)
            if dropped:
                log.warning("model=%s dropped %d leases and waiters of absent gateways", model, dropped)

    async def _tick_model(self, model: str, capacity: int) -> None:
        held = sorted(self._held.get(model, ()))
        tick = self.scripts.tick(model, capacity, held)
        depth, _active, missing = await asyncio.wait_for(tick, self._io_budget)
        self._set_depth(model, depth)
        if missing:
            self._held.get(model, set()).difference_update(missing)
            log.warning(
                "model=%s %d leases were gone from Redis when renewed (expired or Redis restarted)",
                model,
                len(missing),
            )
