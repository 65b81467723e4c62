"""The admission queue's order, as plain code: priority, then fair share between tenants, then arrival.

Fair share is start-time fair queueing (SFQ, Goyal et al.) weighted by token cost. The queue keeps a
virtual time ``V`` (the start tag of the last request granted from the queue) and each tenant's finish
tag ``F[t]``. A request of tenant ``t`` with cost ``c`` that joins the queue gets

    start = max(V, F[t]);  F[t] = start + max(1, c)

and waits ordered by ``(-priority, start, arrival)``. A tenant that floods the queue pushes only its own
tags ahead; a tenant that arrives later starts at ``V`` and is served next among equal priorities. Each
backlogged tenant therefore gets an equal share of the tokens served, whatever the ratio of their loads.

The Lua scripts (``lua/*.lua``) keep the same state in Redis and encode the same order into a sorted-set
member; :class:`FairQueue` is the reference they are tested against.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

PRIORITY_MAX = 9999
TAG_DIGITS = 15
MEMBER_PREFIX = 4 + 2 * TAG_DIGITS  # inverted priority, start tag, arrival sequence


def clamp_priority(priority: int) -> int:
    return max(0, min(PRIORITY_MAX, priority))


def queue_member(priority: int, start: int, seq: int, ticket: str) -> str:
    """Sorted-set member whose byte order is the grant order (all scores are equal)."""
    return f"{PRIORITY_MAX - clamp_priority(priority):04d}{start:0{TAG_DIGITS}d}{seq:0{TAG_DIGITS}d}{ticket}"


def ticket_of(member: str) -> str:
    return member[MEMBER_PREFIX:]


def start_of(member: str) -> int:
    return int(member[4 : 4 + TAG_DIGITS])


@dataclass(slots=True)
class FairClock:
    """SFQ's virtual time and the tenants' finish tags."""

    virtual: int = 0
    finish: dict[str, int] = field(default_factory=dict)

    def tag(self, tenant: str, cost: int) -> int:
        """The start tag of a request joining the queue; advances the tenant's finish tag."""
        start = max(self.virtual, self.finish.get(tenant, 0))
        self.finish[tenant] = start + max(1, cost)
        return start

    def granted(self, start: int) -> None:
        self.virtual = max(self.virtual, start)


@dataclass(slots=True)
class FairQueue:
    """In-memory reference of the Redis queue's order (used by tests and to explain the scripts)."""

    clock: FairClock = field(default_factory=FairClock)
    heap: list[str] = field(default_factory=list)
    seq: int = 0

    def push(self, ticket: str, tenant: str, priority: int, cost: int) -> str:
        self.seq += 1
        member = queue_member(priority, self.clock.tag(tenant, cost), self.seq, ticket)
        heapq.heappush(self.heap, member)
        return member

    def pop(self) -> str | None:
        if not self.heap:
            return None
        member = heapq.heappop(self.heap)
        self.clock.granted(start_of(member))
        return ticket_of(member)

    def __len__(self) -> int:
        return len(self.heap)
