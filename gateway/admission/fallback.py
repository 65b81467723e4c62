"""Degraded mode: the shared Redis queue while Redis answers, local limits while it does not.

The presence heartbeat, with a PING on the pipelined connection, doubles as the probe: it runs every
interval from the lifespan's Background, marks the gateway degraded when Redis fails (or the pipelined
connection went silent: it is closed, and the next probe opens a fresh one) and returns it to the shared
queue by itself once Redis answers again; ``/ready`` says ``redis: unreachable`` while degraded. A request
whose shared admission fails (at its acquire, or while it waits: its blocking read failed) is logged,
counted (``llmgw_admission_fallbacks_total``) and admitted locally. Every
Redis call has a timeout, so a request never waits past its own deadline; a lease granted locally is
released locally.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from gateway.admission.base import AdmissionUnavailable, Lease, Ticket
from gateway.admission.local import LocalAdmission
from gateway.admission.presence import Presence
from gateway.admission.redis_queue import RedisAdmission
from gateway.errors import QueueFull, QueueTimeout
from gateway.metrics import GatewayMetrics
from gateway.periodic import Background
from gateway.redis_clients import REDIS_DOWN

log = logging.getLogger("llmgw.admission")
MIN_LOCAL_WAIT_S = 0.001


class FallbackAdmission:
    waits = True

    def __init__(
        self,
        shared: RedisAdmission,
        local: LocalAdmission,
        presence: Presence,
        metrics: GatewayMetrics,
        probe_s: float,
    ) -> None:
        self.shared, self.local, self.presence, self.metrics = shared, local, presence, metrics
        self.probe_s = probe_s
        self._degraded = False
        self._bg: Background | None = None

    @property
    def degraded(self) -> bool:
        return self._degraded

    async def start(self) -> None:
        await self.shared.start()
        await self.probe()
        self._bg = Background()
        self._bg.start(self.probe_s, self.probe)

    async def stop(self) -> None:
        if self._bg is not None:
            await self._bg.close()
        if not self._degraded:
            try:
                await self.presence.leave()
            except REDIS_DOWN as exc:
                log.debug("presence key not removed: %s", exc)
        await self.shared.stop()

    async def probe(self) -> None:
        try:
            replicas = await self.presence.beat()
            await self.shared.ping()
        except REDIS_DOWN as exc:
            self._enter_degraded(f"{type(exc).__name__}: {exc}")
            return
        if self._degraded:
            self._degraded = False
            self.metrics.redis_degraded.set(0)
            log.warning("redis is back: shared admission queue in force again (%d gateways)", replicas)

    def _enter_degraded(self, why: str) -> None:
        if self._degraded:
            return
        self._degraded = True
        self.metrics.redis_degraded.set(1)
        log.warning(
            "redis unreachable (%s): degraded to local admission, %.0f%% of each model's capacity",
            why,
            100 * self.presence.share,
        )

    async def resize(self, model: str, capacity: int) -> None:
        if self._degraded:
            return
        try:
            await self.shared.resize(model, capacity)
        except AdmissionUnavailable as exc:
            log.warning("model=%s capacity change not shared: %s", model, exc)

    async def acquire(self, ticket: Ticket, capacity: int) -> tuple[Lease, float]:
        try:
            return await self._acquire(ticket, capacity)
        except QueueFull:
            self.metrics.rate_limited.labels(ticket.model, "queue_full").inc()
            raise
        except QueueTimeout:
            self.metrics.rate_limited.labels(ticket.model, "queue_timeout").inc()
            raise

    async def _acquire(self, ticket: Ticket, capacity: int) -> tuple[Lease, float]:
        started = time.monotonic()
        if not self._degraded:
            try:
                return await self.shared.acquire(ticket, capacity)
            except AdmissionUnavailable as exc:
                log.warning(
                    "request_id=%s model=%s shared queue failed: %s; admitted locally",
                    ticket.request_id, ticket.model, exc,
                )  # fmt: skip
                self.metrics.admission_fallbacks.labels(ticket.model).inc()
                self._enter_degraded(str(exc))
        return await self._acquire_locally(ticket, capacity, started)

    async def _acquire_locally(self, ticket: Ticket, capacity: int, started: float) -> tuple[Lease, float]:
        self.local.share = self.presence.share
        left = max(MIN_LOCAL_WAIT_S, ticket.max_wait_s - (time.monotonic() - started))
        lease, _ = await self.local.acquire(dataclasses.replace(ticket, max_wait_s=left), capacity)
        return lease, time.monotonic() - started
