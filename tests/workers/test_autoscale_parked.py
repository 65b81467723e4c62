"""Which replicas the scaler put to sleep instead of stopping them: the most recently parked is woken
first, the oldest stopped first once asleep for the delay, and one no longer asleep is forgotten."""

from __future__ import annotations

from workers.autoscale.parked import Parked


def test_the_most_recently_parked_wakes_first_and_only_parked_ones() -> None:
    p = Parked()
    p.park("m-0", 10.0)
    p.park("m-1", 12.0)
    assert p.to_wake(["m-0", "m-1", "m-2"], 1) == ["m-1"]
    assert p.to_wake(["m-0", "m-1", "m-2"], 5) == ["m-1", "m-0"]
    assert p.to_wake(["m-2"], 1) == []


def test_due_after_the_delay_oldest_first() -> None:
    p = Parked()
    p.park("m-1", 12.0)
    p.park("m-0", 10.0)
    assert p.due(["m-0", "m-1"], 14.9, 5.0) == []
    assert p.due(["m-0", "m-1"], 15.0, 5.0) == ["m-0"]
    assert p.due(["m-0", "m-1"], 20.0, 5.0) == ["m-0", "m-1"]
    assert p.due(["m-1"], 20.0, 5.0) == ["m-1"]  # only the listed ones


def test_woken_elsewhere_or_gone_is_forgotten_and_taken_is_no_longer_parked() -> None:
    p = Parked()
    p.park("m-0", 1.0)
    p.park("m-1", 1.0)
    p.keep_only({"m-1"})  # m-0 was woken by a gateway's wake request
    assert "m-0" not in p and "m-1" in p
    p.take("m-1")
    assert p.since == {}
