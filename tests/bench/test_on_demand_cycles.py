"""The short form of ``make on-demand-cycles``: the FAKE ENGINE as the on-demand replica, two gateways,
real Redis, the real supervisor and activator; every cycle answers every request and makes exactly one
wake, asked for by exactly one gateway."""

from __future__ import annotations

from pathlib import Path

from bench.on_demand_cycles import run


async def test_two_stop_start_cycles_under_load_two_gateways(tmp_path: Path, redis_url: str) -> None:
    report = await run(tmp_path, False, 2, clients=4, per_client=3, idle_s=0.5, redis_url=redis_url)
    assert len(report.cycles) == 2
    assert [(c.failed, c.wakes, c.wake_requests) for c in report.cycles] == [(0, 1, 1)] * 2
    assert report.ok
    print(report.summary())
