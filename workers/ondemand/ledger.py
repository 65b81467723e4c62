"""The on-demand memory ledger of one GPU (pure, no I/O): what each supervised replica holds there, as
nvidia-smi measured it per process (awake after its last wake, asleep after its last sleep), plus the rest
of the card (``baseline``: what the card uses beyond those processes). From it: the card's used memory
predicted for a set of replica states, and the :class:`workers.ondemand.room.Room` a wake needs.

Before a replica was ever measured the ledger uses the caller's estimate when awake (the planner's budget
arithmetic) and :data:`UNMEASURED_ASLEEP_BYTES` when asleep in vLLM's sleep mode; every measurement
replaces them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from workers.ondemand.room import Resident, Room, make_room

GIB = 1 << 30
UNMEASURED_ASLEEP_BYTES = 2 * GIB
"""A sleeping vLLM replica not yet measured: about 1.6 GiB stay on an H200 (CUDA context, the allocator's
non-sleeping pools); replaced by the measurement after its first sleep."""

Holding = Literal["awake", "asleep", "stopped"]


@dataclass(frozen=True, slots=True)
class Slot:
    """One replica on the device as the ledger sees it now."""

    replica: str
    model: str
    holding: Holding
    estimate: int
    """Bytes it is expected to take awake before it was measured."""
    priority: int = 50
    last_used: float = 0.0
    busy: bool = True
    sleeps_in_place: bool = True
    """False when its sleep stops the process (gives back everything)."""


@dataclass(slots=True)
class DeviceBook:
    """Measurements of one GPU: per replica awake and asleep bytes, and the card's baseline."""

    awake: dict[str, int] = field(default_factory=dict)
    asleep: dict[str, int] = field(default_factory=dict)
    baseline: int = 0

    def holds(self, s: Slot, holding: Holding | None = None) -> int:
        """Bytes ``s`` holds in ``holding`` (its current one by default)."""
        h = s.holding if holding is None else holding
        if h == "awake":
            return self.awake.get(s.replica, s.estimate)
        if h == "asleep":
            return self.asleep.get(s.replica, UNMEASURED_ASLEEP_BYTES)
        return 0

    def predicted_used(self, slots: Sequence[Slot], changes: Mapping[str, Holding] | None = None) -> int:
        """The card's used bytes with every slot in its holding, ``changes`` applied (replica -> holding)."""
        changes = changes or {}
        return self.baseline + sum(self.holds(s, changes.get(s.replica)) for s in slots)

    def record(self, replica: str, holding: Holding, measured: int, card_used: int, ours: int) -> None:
        """Take one reading: ``replica`` holds ``measured`` bytes in ``holding``; the card uses
        ``card_used`` of which ``ours`` are the supervised replicas' processes."""
        if holding == "awake":
            self.awake[replica] = measured
        elif holding == "asleep":
            self.asleep[replica] = measured
        self.baseline = max(0, card_used - ours)

    def room(self, slots: Sequence[Slot], waking: Slot, capacity: int) -> Room:
        """Which awake idle replicas of priority <= ``waking``'s must sleep (LRU first) for it to wake
        within ``capacity`` bytes of the card: each gives back what it holds awake minus what it keeps
        asleep (everything when its sleep stops it)."""
        others = [s for s in slots if s.replica != waking.replica]
        free = capacity - self.predicted_used(slots)
        need = self.holds(waking, "awake") - self.holds(waking)
        residents = [
            Resident(
                s.replica, s.model,
                self.holds(s) - (self.holds(s, "asleep") if s.sleeps_in_place else 0),
                s.priority, s.last_used, s.busy,
            )
            for s in others
            if s.holding == "awake"
        ]  # fmt: skip
        return make_room(residents, need, free, waking.priority)


@dataclass(slots=True)
class Stillness:
    """When a reading of one GPU may be booked as settled: only once every other replica on it has been
    still (no wake or sleep going on, none ended) for ``settle_s``. vLLM's allocations go on for a while
    after a wake returns: a reading taken 0.27 s after another model's wake was 1.22 % of the card off."""

    settle_s: float
    changed_at: dict[str, float] = field(default_factory=dict)
    """Replica id -> when its last wake or sleep ended (monotonic seconds)."""

    def changed(self, replica: str, now: float) -> None:
        self.changed_at[replica] = now

    def wait_s(self, replica: str, others_changing: bool, now: float) -> float | None:
        """Seconds to wait before a reading of ``replica`` is settled: 0 when it is now; None while
        another replica is changing (no bound is known yet)."""
        if others_changing:
            return None
        last = max((t for r, t in self.changed_at.items() if r != replica), default=None)
        return 0.0 if last is None else max(0.0, self.settle_s - (now - last))
