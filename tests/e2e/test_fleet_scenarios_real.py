"""The short form of `make fleet-scenarios-real` (bench/fleet_scenarios.py): real vLLM CPU replicas
(SmolLM2 x2, MiniLM) on an embedded stack of its own, under mixed load through nginx: SmolLM2 scaled
2 -> 1 -> 2, then rolling-replaced (max_model_len changed); every request answered. It runs first of the
session (tests/e2e/conftest.py), before the shared stack is up."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fleet_scenarios import SHORT, Plan, failures, row, run

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(1200)
async def test_scale_and_rolling_replace_of_real_replicas_fail_no_request(tmp_path: Path) -> None:
    up_s, outcomes = await run(tmp_path, Plan(), False, SHORT)
    print(f"stack up in {up_s:.0f} s\n" + "\n".join(row(o) for o in outcomes))
    assert [o.name for o in outcomes] == SHORT
    assert failures(outcomes) == 0
    assert all(o.answered > 0 for o in outcomes)
