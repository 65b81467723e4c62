"""The short form of ``make autoscale``: FAKE ENGINE replicas at 0..2 under the supervisor as the scaler,
two gateways, real Redis: each cycle answers the request held through the cold start, grows to 2 under a
burst of streams, and returns to 0; the fault suite's checkers find no request lost, no stream cut, no
generation run twice (counted from the engines' request logs), and every answer's generation logged."""

from __future__ import annotations

from pathlib import Path

from bench.autoscale_cycles import run


async def test_two_cycles_from_zero_to_two_and_back(tmp_path: Path, redis_url: str) -> None:
    report = await run(tmp_path, False, 2, burst=32, delay_s=1.0, redis_url=redis_url)
    print(report.summary())
    assert len(report.cycles) == 2
    assert [(c.failed, c.lost, c.cut, c.ran_twice, c.unseen) for c in report.cycles] == [(0,) * 5] * 2
    assert [c.most_ready for c in report.cycles] == [2, 2]
    assert [c.ready_in_burst for c in report.cycles] == [2, 2]  # fake streams outlast a start
    assert all(c.cold_start_s > 0 for c in report.cycles)
    assert [c.eta_s is None for c in report.cycles] == [True, False]  # the 2nd is told the 1st's start
    assert report.cycles[1].eta_error is not None
