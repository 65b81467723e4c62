"""Admission inside one process: exact per gateway, used alone or while Redis is unreachable."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from dataclasses import dataclass, field

from gateway.admission.base import Ticket
from gateway.errors import QueueFull, QueueTimeout


@dataclass(order=True)
class _Waiter:
    priority: int
    seq: int
    future: asyncio.Future[None] = field(compare=False)


class _LocalLease:
    __slots__ = ("_model", "_owner", "_released")

    def __init__(self, owner: LocalAdmission, model: str) -> None:
        self._owner = owner
        self._model = model
        self._released = False

    async def release(self) -> None:
        if not self._released:
            self._released = True
            self._owner.give_back(self._model)

    async def refund(self, tokens: int) -> None:
        """Nothing to give back: the local queue orders by priority and arrival, not by tokens."""
        return None


class _ModelQueue:
    def __init__(self) -> None:
        self.running = 0
        self.waiters: list[_Waiter] = []


class LocalAdmission:
    """Capacity slots per model with a priority-then-arrival queue; waiters are woken on release."""

    waits = True

    def __init__(self, share: float = 1.0) -> None:
        self._queues: dict[str, _ModelQueue] = {}
        self._seq = itertools.count()
        self.share = share

    async def resize(self, model: str, capacity: int) -> None:
        """Nothing to do: local slots never count below one (a request granted before its model is
        awake waits for it on the request path)."""
        return None

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    @property
    def degraded(self) -> bool:
        return False

    def _limit(self, capacity: int) -> int:
        return max(1, int(capacity * self.share))

    async def acquire(self, ticket: Ticket, capacity: int) -> tuple[_LocalLease, float]:
        q = self._queues.setdefault(ticket.model, _ModelQueue())
        if q.running < self._limit(capacity) and not q.waiters:
            q.running += 1
            return _LocalLease(self, ticket.model), 0.0
        return await self._wait(q, ticket)

    async def _wait(self, q: _ModelQueue, ticket: Ticket) -> tuple[_LocalLease, float]:
        if len(q.waiters) >= ticket.max_queue:
            raise QueueFull(
                f"the queue for model '{ticket.model}' is full ({ticket.max_queue} waiting); retry later",
                retry_after=1.0,
            )
        started = time.monotonic()
        waiter = _Waiter(-ticket.priority, next(self._seq), asyncio.get_running_loop().create_future())
        heapq.heappush(q.waiters, waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), ticket.max_wait_s)
        except TimeoutError:
            self._abandon(q, waiter)
            waited = time.monotonic() - started
            raise QueueTimeout(
                f"waited {waited:.1f} s in the queue for model '{ticket.model}' without getting a slot"
                f" (limit {ticket.max_wait_s:g} s); retry later",
                retry_after=1.0,
            ) from None
        except BaseException:
            self._abandon(q, waiter)
            raise
        return _LocalLease(self, ticket.model), time.monotonic() - started

    def _abandon(self, q: _ModelQueue, waiter: _Waiter) -> None:
        if waiter.future.done() and not waiter.future.cancelled():
            self.give_back_queue(q)  # the slot was handed to us as we gave up: pass it on
            return
        waiter.future.cancel()
        if waiter in q.waiters:
            q.waiters.remove(waiter)
            heapq.heapify(q.waiters)

    def give_back(self, model: str) -> None:
        self.give_back_queue(self._queues[model])

    def give_back_queue(self, q: _ModelQueue) -> None:
        while q.waiters:
            waiter = heapq.heappop(q.waiters)
            if not waiter.future.done():
                waiter.future.set_result(None)  # hand-over: the slot stays taken
                return
        q.running -= 1
