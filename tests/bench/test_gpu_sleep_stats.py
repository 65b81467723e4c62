"""bench/gpu/sleep_bench.py's summary: the median of an even count is the mean of the two middle values
(the 2026-12-03 run reported 0.618, the upper middle, for six level-1 wakes whose median is 0.587)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.gpu.sleep_bench import stats

RUN2 = Path(__file__).resolve().parents[2] / "bench/gpu/results/sleep/run2/sleep.json"


def test_even_count_median_is_the_mean_of_the_middle_two() -> None:
    wakes = json.loads(RUN2.read_text())["wake"]
    level1 = [w["asleep"]["first_ttft_s"] for w in wakes if w["level"] == 1]
    assert len(level1) == 6
    assert stats(level1) == "0.481–0.711 s (median 0.587, n=6)"


def test_odd_count_median_is_the_middle_value() -> None:
    assert stats([3.0, 1.0, 2.0]) == "1.000–3.000 s (median 2.000, n=3)"
