"""bench/gpu/sleep_bench.py's summary: the median of an even count is the mean of the two middle values
(the 2026-12-03 run reported 0.618, the upper middle, for six level-1 wakes whose median is 0.587)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.gpu.sleep_bench import ledger_lines, stats

RUN2 = Path(__file__).resolve().parents[2] / "bench/gpu/results/sleep/run2/sleep.json"


def test_even_count_median_is_the_mean_of_the_middle_two() -> None:
    wakes = json.loads(RUN2.read_text())["wake"]
    level1 = [w["asleep"]["first_ttft_s"] for w in wakes if w["level"] == 1]
    assert len(level1) == 6
    assert stats(level1) == "0.481–0.711 s (median 0.587, n=6)"


def test_odd_count_median_is_the_middle_value() -> None:
    assert stats([3.0, 1.0, 2.0]) == "1.000–3.000 s (median 2.000, n=3)"


LINE = (
    "2026-12-05 23:43:36,527 INFO llmgw.ondemand ledger gpu:0 after wake from level 0 of replica=m1-0: "
    "it holds 44207 MiB; predicted 89386 MiB, card 88414 MiB (+0.68 % of 143771 MiB); changing: none; "
    "the others still for 3.45 s (waited 0.00 s)\n"
)


def test_a_ledger_line_with_the_stillness_after_it_reads_as_settled(tmp_path: Path) -> None:
    log = tmp_path / "supervisor.log"
    log.write_text(LINE + LINE.replace("changing: none;", "changing: m2-0,m3-0;"))
    rows = ledger_lines(log)
    assert [r["changing"] for r in rows] == ["none", "m2-0,m3-0"]
    assert rows[0]["off_pct_of_card"] == 0.676
