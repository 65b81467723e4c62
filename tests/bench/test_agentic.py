"""The agentic-trace benchmark's short form on the FAKE ENGINE (its prefix-cache model): agent sessions
with tool pauses through 2 and 4 real gateways (real Redis) per routing policy, and the ideal of one
replica alone. Asserted: every request answered; the table's rows; shares that add up; prefix affinity
keeps sessions where their prefix is cached better than both simple policies (hit rate)."""

from __future__ import annotations

import math

from bench.agentic import IDEAL, POLICIES, Options, bench, table


async def test_agentic_short_form() -> None:
    o = Options(sessions=16, turns=3, agents=2, system_words=300, pause=(0.05, 0.2), gateways=(2, 4))
    results = await bench(o)
    print(table(results))
    assert [(r.label, r.gateways) for r in results] == [(IDEAL, 1)] + [
        (p, g) for g in (2, 4) for p in POLICIES
    ]
    for r in results:
        assert r.requests == 16 * 3 and r.errors == 0, r
        assert math.isclose(sum(r.shares), 1.0) and 0 < r.hit_rate <= 1, r
        assert r.follow_ttft_p90_ms >= r.follow_ttft_p50_ms > 0, r
    for g in (2, 4):
        by = {r.label: r for r in results if r.gateways == g}
        affinity = by["prefix_affinity"].hit_rate
        assert affinity > by["round_robin"].hit_rate and affinity > by["least_inflight"].hit_rate, table(
            results
        )
        assert by["prefix_affinity"].of_ideal <= 1.0 + 1e-9
