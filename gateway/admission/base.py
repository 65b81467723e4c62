"""The admission interface the request path depends on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Ticket:
    """What admission needs to know of a request."""

    request_id: str
    model: str
    tenant: str
    priority: int
    cost: int
    max_wait_s: float
    max_queue: int


class AdmissionUnavailable(Exception):
    """The shared queue cannot be reached (Redis down or too slow); the caller falls back to local limits."""


class Lease(Protocol):
    """A held slot; released exactly once, whatever happens to the request."""

    async def release(self) -> None: ...

    async def refund(self, tokens: int) -> None:
        """The request used ``tokens`` fewer than its ticket's cost: fair share gives them back to its
        tenant (where the order weighs tenants by tokens); at most what was charged, once."""
        ...


class Admission(Protocol):
    #: False when ``acquire`` returns at once without I/O (admission off): the request path then
    #: awaits it directly instead of racing it against the client's disconnect.
    waits: bool

    async def acquire(self, ticket: Ticket, capacity: int) -> tuple[Lease, float]:
        """Wait for a slot; returns the lease and the seconds waited. Raises QueueFull or QueueTimeout.

        Cancellation-safe: a cancelled acquire leaves the queue at once, and a slot handed to it
        meanwhile goes on to the next waiter.
        """
        ...

    async def resize(self, model: str, capacity: int) -> None:
        """The model's capacity changed (a woken replica is ready): grant queued requests at once."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    @property
    def degraded(self) -> bool: ...
