"""Replicas the scaler put to sleep instead of stopping them (pure: no I/O, the clock passed in).

Where sleep exists (a GPU replica launched with vLLM's sleep mode), the replica a scale-down removes is
drained and put to sleep in place first, and stays listed ASLEEP for ``keep_s`` (the rule's
``scale_down_delay_s`` once more) before it is stopped: demand that returns meanwhile wakes it, which is
much faster than a start from nothing. :class:`Parked` remembers which replicas sleep for that reason and
since when; the loop (:mod:`workers.autoscale.loop`) acts on what it says.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field


@dataclass
class Parked:
    """Replica id -> when the scaler put it to sleep (seconds of the scaler's clock)."""

    since: dict[str, float] = field(default_factory=dict)

    def park(self, replica_id: str, now_s: float) -> None:
        self.since[replica_id] = now_s

    def keep_only(self, asleep: Collection[str]) -> None:
        """Forget replicas no longer asleep and listed (woken by a gateway's wake request, or retired)."""
        for rid in [r for r in self.since if r not in asleep]:
            del self.since[rid]

    def __contains__(self, replica_id: object) -> bool:
        return replica_id in self.since

    def to_wake(self, listed: Sequence[str], count: int) -> list[str]:
        """Up to ``count`` of the parked replicas among ``listed``, the most recently parked first."""
        mine = sorted((r for r in listed if r in self.since), key=lambda r: -self.since[r])
        return mine[:count]

    def due(self, listed: Sequence[str], now_s: float, keep_s: float) -> list[str]:
        """The parked replicas among ``listed`` asleep for ``keep_s`` or more: to stop now, oldest first."""
        mine = [r for r in listed if r in self.since and now_s - self.since[r] >= keep_s]
        return sorted(mine, key=lambda r: self.since[r])

    def take(self, replica_id: str) -> None:
        """The replica is no longer parked (it is being woken or stopped)."""
        self.since.pop(replica_id, None)
