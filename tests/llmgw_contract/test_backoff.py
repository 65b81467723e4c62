"""The one exponential back-off: doubles from the base, stops at the cap."""

from __future__ import annotations

from llmgw_contract.backoff import Backoff


def test_delay_doubles_from_the_base_and_is_capped() -> None:
    b = Backoff(base_s=0.5, max_s=3.0)
    assert [b.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_zero_failures_wait_the_base() -> None:
    assert Backoff(base_s=2.0, max_s=10.0).delay(0) == 2.0
