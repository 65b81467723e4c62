"""The presence stamps' timing and the loop-progress gate, as pure logic (no Redis, no clock)."""

from __future__ import annotations

from gateway.admission.liveness import LoopProgress, StampTiming, Streak


def test_stamps_hold_one_and_a_half_beats_renewed_twice_a_beat() -> None:
    timing = StampTiming(1.0)
    assert timing.stamp_ms == 1500
    assert timing.renew_every_s == 0.5
    assert timing.stall_s == 4.0
    assert timing.reclaim_bound_s() == 2.5  # under the 3 s


def test_a_loop_that_progresses_is_renewed() -> None:
    progress = LoopProgress(stall_s=4.0, now=100.0)
    for t in range(1, 50):
        progress.bump(100.0 + t * 0.1)
        assert progress.renews(100.0 + t * 0.1 + 0.05)


def test_a_stalled_loop_is_renewed_up_to_its_allowance_then_not() -> None:
    progress = LoopProgress(stall_s=4.0, now=100.0)
    assert progress.renews(103.0)  # a 3 s stall keeps its stamps
    assert progress.renews(104.0)
    assert not progress.renews(104.1)  # hung: the stamps lapse 1.5 beats later
    assert progress.stalled_for(104.1) > 4.0
    progress.bump(110.0)  # it came back
    assert progress.renews(110.0)


def test_a_streak_of_failures_is_logged_once_and_its_end_reported() -> None:
    streak = Streak()
    assert streak.succeeded() == 0
    assert streak.failed()
    assert not streak.failed()
    assert not streak.failed()
    assert streak.succeeded() == 3
    assert streak.failed()  # a new streak
