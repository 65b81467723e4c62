"""The failed releases kept to be sent again: bounded, forgotten past their lease's TTL, resent in order
until one fails (pure, no Redis)."""

from __future__ import annotations

import time

import pytest

from gateway.admission.unreleased import Unreleased


def test_bounded_and_forgotten_past_the_ttl() -> None:
    kept = Unreleased(ttl_s=60.0, limit=3)
    for i in range(5):
        kept.add("m", f"l{i}")
    assert kept.pending() == [("m", "l2"), ("m", "l3"), ("m", "l4")]  # the oldest forgotten
    gone = Unreleased(ttl_s=0.0)
    gone.add("m", "l0")
    time.sleep(0.001)
    assert gone.pending() == [] and len(gone) == 0


async def test_resend_stops_at_the_first_failure_and_keeps_the_rest() -> None:
    kept, sent = Unreleased(ttl_s=60.0), []
    for i in range(3):
        kept.failed("m", f"l{i}", OSError("down"))

    async def send(model: str, lease_id: str) -> None:
        if lease_id == "l1":
            raise OSError("still down")
        sent.append(lease_id)

    await kept.resend(send, (OSError,))
    assert sent == ["l0"] and kept.pending() == [("m", "l1"), ("m", "l2")]

    async def broken(model: str, lease_id: str) -> None:
        raise ValueError("not a Redis error")

    with pytest.raises(ValueError):  # only the errors named are taken for 'Redis is still down'
        await kept.resend(broken, (OSError,))
