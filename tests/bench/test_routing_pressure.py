"""The pressure workload's short form on the FAKE ENGINE (its prefix-cache model, sized so that one
replica cannot hold every document but two can hold half each): real gateways (2 and 4) and a real Redis.
Asserted: every request answered; prefix affinity keeps ≥ 95 % of the perfect split's hit rate (one
replica serving half the documents) with shares 50 ± 7.5 %, where round robin, which sends every document
to both caches, loses most of it."""

from __future__ import annotations

import math

from bench.routing_pressure import PERFECT, Options, bench, table


async def test_pressure_short_form() -> None:
    rows = await bench(Options())
    print(table(rows))
    assert [(r.label, r.gateways) for r in rows] == [(PERFECT, 1)] + [
        (p, g) for g in (2, 4) for p in ("round_robin", "prefix_affinity")
    ]
    for r in rows:
        assert r.errors == 0 and math.isclose(sum(r.shares), 1.0), r
    for g in (2, 4):
        by = {r.label: r for r in rows if r.gateways == g}
        affinity, rr = by["prefix_affinity"], by["round_robin"]
        assert affinity.of_perfect >= 0.95, table(rows)
        assert all(abs(s - 0.5) <= 0.075 for s in affinity.shares), table(rows)
        assert rr.of_perfect < 0.8, table(rows)  # the workload does overflow one cache
