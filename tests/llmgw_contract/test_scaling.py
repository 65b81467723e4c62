"""The fleet's scaling rule: validation (errors name the field path) and the pure arithmetic of desired
replicas (no I/O, time passed in)."""

from __future__ import annotations

import pytest

from llmgw_contract.fleet import FleetError, parse_fleet
from llmgw_contract.scaling import Autoscale, ScalingRule, scaling_rule

BASE = "models:\n - name: a\n   source: {package: x}\n"


def one(extra: str) -> str:
    return BASE + "".join(f"   {line}\n" for line in extra.splitlines())


def test_without_a_rule_the_model_keeps_its_replicas_fixed() -> None:
    model = parse_fleet(one("replicas: 3\nconcurrency: 5")).models[0]
    assert model.scaling is None
    assert scaling_rule(model) == ScalingRule(3, 3, 5, 600.0)


def test_a_rule_fills_its_target_from_the_concurrency() -> None:
    text = one("activation: on_demand\nscaling: {min_replicas: 0, max_replicas: 4, scale_down_delay_s: 30}")
    rule = scaling_rule(parse_fleet(text).models[0])
    assert rule == ScalingRule(0, 4, 8, 30.0)
    text = one("scaling: {min_replicas: 1, max_replicas: 2, target_per_replica: 3}")
    assert scaling_rule(parse_fleet(text).models[0]).target_per_replica == 3


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (
            "scaling: {min_replicas: 3, max_replicas: 2}",
            "models.0.scaling: Value error, min_replicas 3 is above",
        ),
        (
            "scaling: {min_replicas: 0, max_replicas: 2}",
            "models.0.scaling: Value error, min_replicas 0 needs",
        ),
        (
            "replicas: 5\nscaling: {min_replicas: 1, max_replicas: 2}",
            "models.0.scaling: Value error, replicas 5",
        ),
        (
            "engine: {tensor_parallel_size: 2}\nplacement: {devices: [0, 1, 0, 0]}\n"
            "scaling: {min_replicas: 1, max_replicas: 2}",
            "max_replicas 2: placement.devices [0, 1, 0, 0]: each replica needs tensor_parallel_size (2)",
        ),
        (
            "scaling: {min_replicas: 1, max_replicas: 65}",
            "models.0.scaling.max_replicas: Input should be less",
        ),
        ("scaling: {min_replicas: 1, max_replicas: 2, target_per_replica: 0}", "scaling.target_per_replica"),
        ("scaling: {min_replicas: 1, max_replicas: 2, speed: 3}", "models.0.scaling.speed: Extra inputs"),
        ("scaling: {max_replicas: 2}", "models.0.scaling.min_replicas: Field required"),
    ],
)
def test_a_rule_that_cannot_work_is_refused_naming_the_field(extra: str, fragment: str) -> None:
    with pytest.raises(FleetError) as err:
        parse_fleet(one(extra))
    assert fragment in str(err.value)


def test_a_minimum_of_zero_is_allowed_where_requests_wait_in_the_shared_queue() -> None:
    model = parse_fleet(one("activation: on_demand\nscaling: {min_replicas: 0, max_replicas: 2}")).models[0]
    assert scaling_rule(model).min_replicas == 0


def test_placement_devices_that_hold_the_maximum_pass() -> None:
    text = one(
        "engine: {tensor_parallel_size: 2}\nplacement: {devices: [0, 1, 2, 3]}\n"
        "scaling: {min_replicas: 1, max_replicas: 4}"
    )
    assert scaling_rule(parse_fleet(text).models[0]).max_replicas == 4


RULE = ScalingRule(min_replicas=0, max_replicas=4, target_per_replica=8, scale_down_delay_s=60.0)


@pytest.mark.parametrize(
    ("demand", "needed"), [(0, 0), (1, 1), (8, 1), (9, 2), (24, 3), (33, 4), (1000, 4), (0.5, 1)]
)
def test_needed_replicas_are_demand_over_target_within_the_rule(demand: float, needed: int) -> None:
    assert Autoscale(RULE).needed(demand) == needed


def test_the_minimum_holds_with_no_demand() -> None:
    assert Autoscale(ScalingRule(2, 4, 8, 60.0)).needed(0) == 2


def test_scaling_up_is_at_once() -> None:
    assert Autoscale(RULE).desired(demand=20, current=1, last_busy_s=100.0, now_s=100.0) == 3
    assert Autoscale(RULE).desired(demand=3, current=0, last_busy_s=None, now_s=0.0) == 1


def test_scaling_down_waits_for_the_delay_after_the_demand_last_needed_the_count() -> None:
    scale = Autoscale(RULE)
    assert scale.busy(demand=20, current=3)
    assert not scale.busy(demand=5, current=3)
    assert scale.desired(demand=5, current=3, last_busy_s=100.0, now_s=159.9) == 3
    assert scale.desired(demand=5, current=3, last_busy_s=100.0, now_s=160.0) == 1
    assert scale.desired(demand=0, current=1, last_busy_s=100.0, now_s=170.0) == 0
    assert scale.desired(demand=0, current=1, last_busy_s=None, now_s=0.0) == 0


def test_a_count_above_a_lowered_maximum_comes_down_to_it_within_the_delay() -> None:
    assert Autoscale(RULE).desired(demand=2, current=6, last_busy_s=100.0, now_s=101.0) == 4
