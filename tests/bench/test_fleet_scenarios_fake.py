"""`make fleet-scenarios-real` with FAKE ENGINE replicas (testing/fake_engine.py) on the same embedded stack
(real Redis, supervisor, two gateways, nginx, the keeper): every scenario converges, the load through nginx
loses nothing, and each scenario ends the way it says (no gateway restarted to learn a model, the old
replicas keep serving after a bad replace, bounded start attempts, 404 after a removal, adoption)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bench.fleet_scenarios import SCENARIOS, Plan, failures, row, run


@pytest.mark.timeout(300)
async def test_every_scenario_converges_and_fails_no_request(tmp_path: Path) -> None:
    # replica ports below the ephemeral range, away from the real run's 18500 (make test runs both)
    base_port = random.randrange(20000, 30000, 50)
    _, outcomes = await run(tmp_path, Plan(pause_s=0.05, base_port=base_port), True, list(SCENARIOS))
    print("\n".join(row(o) for o in outcomes))
    notes = {o.name: o.note for o in outcomes}
    assert list(notes) == list(SCENARIOS)
    assert failures(outcomes) == 0
    assert "no gateway restarted" in notes["add a model"]
    assert "2 replaces failed and were reported; the same replicas serve" in notes["replace with a bad flag"]
    assert "3 start attempts, then left ['failed']" in notes["a model that never starts"]
    assert "404 model_not_found" in notes["remove a model"]
    assert "same instances" in notes["Redis killed, empty again"]
    assert "3 replicas adopted (same instances)" in notes["supervisor killed -9"]
