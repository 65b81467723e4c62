"""The short form of ``make autoscale``: FAKE ENGINE replicas at 0..2 under the supervisor as the scaler,
two gateways, real Redis: each cycle answers the request held through the cold start, grows to 2 under a
burst of streams, cuts none, and returns to 0."""

from __future__ import annotations

from pathlib import Path

from bench.autoscale_cycles import run


async def test_two_cycles_from_zero_to_two_and_back(tmp_path: Path, redis_url: str) -> None:
    report = await run(tmp_path, False, 2, burst=32, delay_s=1.0, redis_url=redis_url)
    print(report.summary())
    assert len(report.cycles) == 2
    assert [(c.failed, c.cut, c.most_ready) for c in report.cycles] == [(0, 0, 2)] * 2
    assert all(c.cold_start_s > 0 for c in report.cycles)
