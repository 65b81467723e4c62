"""The autopilot's learned move costs and predicted demand (pure)."""

from __future__ import annotations

import pytest

from workers.ondemand.autopilot.costs import CostTable, wake_move
from workers.ondemand.autopilot.forecast import WAITING_BONUS, ewma, predicted


def test_costs_start_from_the_seed_then_follow_the_measurements() -> None:
    costs = CostTable(
        seed={"wake1": 0.33, "wake2": 2.55, "sleep1": 9.9, "sleep2": 0.05, "start": 88, "stop": 0}
    )
    assert costs.cost("a", "sleep1") == 9.9
    costs.observe("a", "sleep1", 20.0)
    assert costs.cost("a", "sleep1") == 20.0  # the first sample replaces the seed
    costs.observe("a", "sleep1", 10.0)
    assert costs.cost("a", "sleep1") == pytest.approx(17.0)  # alpha 0.3
    assert costs.cost("b", "sleep1") == 9.9  # per model


def test_the_wake_costed_by_the_level_it_wakes_from() -> None:
    assert [wake_move(s) for s in ("asleep1", "asleep2", "stopped")] == ["wake1", "wake2", "start"]


def test_predicted_demand_weighs_the_newest_window_most_and_waiting_requests_above_all() -> None:
    assert ewma([], 0.5) == 0.0
    assert ewma([4.0, 0.0], 0.5) == 2.0
    assert ewma([0.0, 4.0], 0.75) == 3.0
    assert predicted([0.0], queued=1) == WAITING_BONUS
