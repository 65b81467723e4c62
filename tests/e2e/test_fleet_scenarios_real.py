"""The short form of `make fleet-scenarios-real` (bench/fleet_scenarios.py): real vLLM CPU replicas
(SmolLM2 x2, MiniLM) on an embedded stack of its own, under mixed load through nginx: SmolLM2 scaled
2 -> 1, every request answered (the drain waits for what each replica holds, engine or not). Scaling back
up and the rolling replace (SHORT's other scenarios, ~1.5 and ~3.5 min of real starts here) run in `make
fleet-scenarios-real` and, with the FAKE ENGINE, in tests/bench/test_fleet_scenarios_fake.py; left out
here to keep `make test` within its 45 minutes. It runs first of the session (tests/e2e/conftest.py),
before the shared stack is up."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fleet_scenarios import SHORT, Plan, failures, row, run

SCALE = SHORT[:1]

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(1200)
async def test_scaling_real_replicas_down_fails_no_request(tmp_path: Path) -> None:
    up_s, outcomes = await run(tmp_path, Plan(), False, SCALE)
    print(f"stack up in {up_s:.0f} s\n" + "\n".join(row(o) for o in outcomes))
    assert [o.name for o in outcomes] == SCALE
    assert failures(outcomes) == 0
    assert all(o.answered > 0 for o in outcomes)
