"""The on-demand memory ledger and the idle rule (pure)."""

from __future__ import annotations

from workers.ondemand.room import Resident, idle_expired, make_room

GIB = 1 << 30


def resident(
    name: str, size: float, priority: int = 50, last_used: float = 0.0, busy: bool = False
) -> Resident:
    return Resident(f"{name}-0", name, int(size * GIB), priority, last_used, busy)


def test_a_wake_that_fits_puts_nothing_to_sleep() -> None:
    room = make_room([resident("a", 4)], need=2 * GIB, free=3 * GIB, priority=50)
    assert room.fits and room.evict == ()


def test_least_recently_used_idle_model_sleeps_first_and_no_more_than_needed() -> None:
    residents = [
        resident("new", 2, last_used=30),
        resident("old", 2, last_used=10),
        resident("mid", 2, last_used=20),
    ]
    room = make_room(residents, need=3 * GIB, free=2 * GIB, priority=50)
    assert room.evict == ("old-0",)
    room = make_room(residents, need=5 * GIB, free=2 * GIB, priority=50)
    assert room.evict == ("old-0", "mid-0")


def test_a_model_with_requests_in_flight_or_queued_is_never_evicted() -> None:
    residents = [resident("busy", 8, last_used=0, busy=True), resident("idle", 1, last_used=5)]
    room = make_room(residents, need=4 * GIB, free=2 * GIB, priority=50)
    assert not room.fits and "1024 MiB more" in room.refused
    assert make_room(residents, need=3 * GIB, free=2 * GIB, priority=50).evict == ("idle-0",)


def test_only_lower_or_equal_priority_models_make_room() -> None:
    residents = [resident("vip", 4, priority=90, last_used=0), resident("peer", 4, priority=50, last_used=9)]
    assert make_room(residents, need=4 * GIB, free=1 * GIB, priority=50).evict == ("peer-0",)
    assert not make_room(residents, need=4 * GIB, free=1 * GIB, priority=10).fits


def test_idle_means_nothing_in_flight_or_queued_for_the_whole_timeout() -> None:
    assert idle_expired(busy=False, last_used=100, now=160, idle_timeout_s=60)
    assert not idle_expired(busy=False, last_used=100, now=159, idle_timeout_s=60)
    assert not idle_expired(busy=True, last_used=0, now=1000, idle_timeout_s=60)
