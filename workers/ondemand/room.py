"""The memory ledger of models on demand (pure, no I/O): which idle models to put to sleep so that a wake
fits, and when an awake model has been idle long enough to sleep.

One ledger per device (on a CPU, the host). What an awake replica takes is measured once it is up (its
process tree's resident memory on a CPU) and estimated from the planner's arithmetic before its first
start. A model with requests in flight or queued is never chosen; among the others, only models of
lower or equal priority than the one waking, least recently used first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Resident:
    """An awake replica as the ledger sees it."""

    replica: str
    model: str
    bytes: int
    priority: int
    last_used: float
    busy: bool
    """Requests in flight or queued: never put to sleep to make room."""


@dataclass(frozen=True, slots=True)
class Room:
    """The answer to a wake: the replicas to put to sleep first (maybe none), or why it cannot fit."""

    evict: tuple[str, ...] = ()
    refused: str = ""

    @property
    def fits(self) -> bool:
        return not self.refused


def make_room(residents: Sequence[Resident], need: int, free: int, priority: int) -> Room:
    """Replicas to put to sleep so that ``need`` bytes fit in ``free`` plus what they give back: idle
    ones of priority <= ``priority``, least recently used first, no more than needed."""
    if need <= free:
        return Room()
    candidates = sorted(
        (r for r in residents if not r.busy and r.priority <= priority),
        key=lambda r: (r.last_used, r.replica),
    )
    evict: list[str] = []
    for r in candidates:
        evict.append(r.replica)
        free += r.bytes
        if need <= free:
            return Room(tuple(evict))
    short = need - free
    return Room(refused=f"needs {need >> 20} MiB, {short >> 20} MiB more than idle models of priority <= "
                f"{priority} can give back")  # fmt: skip


def idle_expired(busy: bool, last_used: float, now: float, idle_timeout_s: float) -> bool:
    """True when an awake on-demand model should go to sleep: nothing in flight or queued for
    ``idle_timeout_s`` (``last_used`` is the last moment it had any)."""
    return not busy and now - last_used >= idle_timeout_s
