"""The client side's minimum relay rate, as pure arithmetic over one stream's sends."""

from __future__ import annotations

import pytest

from gateway.pipeline.pace import ClientPace, SlowClient


def test_a_client_that_keeps_the_stream_waiting_and_takes_little_is_too_slow() -> None:
    pace = ClientPace(30.0, 4096, now=0.0)
    pace.sent(65536, 29.0, now=29.0)  # 64 KiB taken after 29 s of waiting: inside the window
    with pytest.raises(SlowClient) as slow:
        pace.sent(65536, 29.0, now=58.0)  # 128 KiB in 58 s (2.3 KB/s), waiting all the time
    assert 2000 < slow.value.rate < 2400


def test_a_client_fast_enough_passes_every_window() -> None:
    pace = ClientPace(1.0, 1000, now=0.0)
    for i in range(1, 100):
        pace.sent(300, 0.09, now=i * 0.1)  # 3,000 B/s, waiting almost all the time


def test_a_stream_slow_at_its_source_is_not_judged() -> None:
    pace = ClientPace(1.0, 1_000_000, now=0.0)
    for i in range(1, 100):
        pace.sent(10, 0.0, now=i * 0.1)  # 100 B/s, but the relay never waited for the client


def test_no_minimum_judges_nothing() -> None:
    pace = ClientPace(1.0, 0, now=0.0)
    pace.sent(0, 5.0, now=5.0)
