"""When a gateway's admission presence stamps are renewed, as pure logic (no I/O, no clock of its own).

A stamp that must outlive a stalled event loop cannot come from that loop, and one renewed regardless of
the loop would keep a hung gateway's slots forever. So a thread renews the stamps (:mod:`stamp_renewer`),
but only while the loop made progress lately: the loop calls :meth:`LoopProgress.bump` about every
:data:`PROGRESS_EVERY_S`; the thread asks :meth:`LoopProgress.renews` before each renewal.

With a beat ``b`` (``LLMGW_PRESENCE_INTERVAL_S``): a stamp holds ``STAMP_BEATS × b`` and is renewed every
``b / RENEWS_PER_BEAT``; the loop may stall ``STALL_BEATS × b``. A killed process stops renewing at once
(its stamp lapses within 1.5 b, and a survivor's next beat, within b, drops its waiters and leases); a
stalled loop keeps its stamps for ``STALL_BEATS × b`` (plus the stamp's 1.5 b); a hung one loses them
``(STALL_BEATS + STAMP_BEATS) × b`` after its last progress.
"""

from __future__ import annotations

from dataclasses import dataclass

PROGRESS_EVERY_S = 0.1
STALL_BEATS = 4.0
STAMP_BEATS = 1.5
RENEWS_PER_BEAT = 2


@dataclass(frozen=True, slots=True)
class StampTiming:
    """The presence stamps' timing for one beat interval."""

    beat_s: float

    @property
    def stamp_ms(self) -> int:
        """How long a stamp holds after it is written."""
        return int(STAMP_BEATS * self.beat_s * 1000)

    @property
    def renew_every_s(self) -> float:
        return self.beat_s / RENEWS_PER_BEAT

    @property
    def stall_s(self) -> float:
        """How long the loop may make no progress before its stamps stop being renewed."""
        return STALL_BEATS * self.beat_s

    def reclaim_bound_s(self) -> float:
        """The longest a killed gateway's slots stay with it: its stamp, then a survivor's next beat."""
        return STAMP_BEATS * self.beat_s + self.beat_s


class LoopProgress:
    """The event loop's last progress as the renewing thread sees it (times on one monotonic clock).

    One float written by the loop and read by the thread: an assignment is atomic, no lock needed."""

    def __init__(self, stall_s: float, now: float) -> None:
        self.stall_s = stall_s
        self._last = now

    def bump(self, now: float) -> None:
        self._last = now

    def stalled_for(self, now: float) -> float:
        return max(0.0, now - self._last)

    def renews(self, now: float) -> bool:
        """Renew now: the loop made progress within the stall allowance."""
        return self.stalled_for(now) <= self.stall_s


class Streak:
    """Failures in a row, so that a run of them is logged once (its start and its end) and each counted."""

    def __init__(self) -> None:
        self.failures = 0

    def failed(self) -> bool:
        """One more failure; True when it starts a streak (log it)."""
        self.failures += 1
        return self.failures == 1

    def succeeded(self) -> int:
        """A success; the length of the streak it ends (0: none; log the recovery otherwise)."""
        ended, self.failures = self.failures, 0
        return ended
