"""The decisions-per-second measurement runs (a tenth of a second) and counts what it decided."""

from __future__ import annotations

from bench.autopilot_decisions import measure


def test_decisions_per_second_is_measured() -> None:
    out = measure(8, 0.05)
    assert out["decisions"] >= 500 and out["decisions_per_s"] > 0 and out["moves_per_decision"] > 0
