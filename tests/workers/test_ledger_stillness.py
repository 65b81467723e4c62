"""When a GPU reading is booked as settled (pure): only once every other replica of the card has been
still for the settle interval; never while one is changing."""

from __future__ import annotations

import pytest

from workers.ondemand.ledger import Stillness


def test_a_reading_waits_until_every_other_replica_was_still_for_the_interval() -> None:
    s = Stillness(settle_s=2.0)
    assert s.wait_s("a-0", others_changing=False, now=100.0) == 0.0  # nothing ever changed
    s.changed("b-0", now=100.0)  # b finished a wake
    assert s.wait_s("a-0", others_changing=False, now=100.27) == pytest.approx(1.73)  # 0.27 s on: not settled
    assert s.wait_s("a-0", others_changing=True, now=103.0) is None  # another one is changing now
    assert s.wait_s("a-0", others_changing=False, now=102.0) == 0.0
    s.changed("a-0", now=102.5)  # its own change does not count against its reading
    assert s.wait_s("a-0", others_changing=False, now=102.5) == 0.0
