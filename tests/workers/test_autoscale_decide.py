"""The supervisor's scaling decisions (pure): up at once, down one at a time after the delay, kept when
the demand returns within it, within the rule's bounds, never a start that does not fit."""

from __future__ import annotations

from llmgw_contract.scaling import ScalingRule
from workers.autoscale.decide import Decision, ModelScaler, idlest

RULE = ScalingRule(min_replicas=1, max_replicas=3, target_per_replica=2, scale_down_delay_s=10.0)


def test_up_at_once_to_what_the_demand_needs() -> None:
    s = ModelScaler(RULE)
    assert s.decide(5, False, ["m-0"], {}, now_s=0) == Decision(3, start=2)


def test_down_only_after_the_delay_and_the_idlest_goes() -> None:
    s = ModelScaler(RULE)
    ids = ["m-0", "m-1"]
    assert s.decide(4, False, ids, {}, now_s=0) == Decision(2)
    assert s.decide(1, False, ids, {"m-0": 0, "m-1": 1}, now_s=5) == Decision(2)
    assert s.decide(1, False, ids, {"m-0": 0, "m-1": 1}, now_s=10) == Decision(1, remove="m-0")


def test_the_delay_starts_again_after_each_step_down() -> None:
    s = ModelScaler(ScalingRule(0, 3, 1, 10.0))
    assert s.decide(3, False, ["a", "b", "c"], {}, now_s=0) == Decision(3)
    assert s.decide(0, False, ["a", "b", "c"], {}, now_s=10).remove == "c"
    assert s.decide(0, False, ["a", "b"], {}, now_s=15) == Decision(2)
    assert s.decide(0, False, ["a", "b"], {}, now_s=20).remove == "b"


def test_demand_back_within_the_delay_keeps_the_replicas() -> None:
    s = ModelScaler(RULE)
    ids = ["m-0", "m-1"]
    assert s.decide(4, False, ids, {}, now_s=0) == Decision(2)
    assert s.decide(0, False, ids, {}, now_s=8) == Decision(2)
    assert s.decide(3, False, ids, {}, now_s=9) == Decision(2)
    assert s.decide(0, False, ids, {}, now_s=15) == Decision(2)  # 6 s after the demand came back
    assert s.decide(0, False, ids, {}, now_s=19).remove == "m-1"


def test_bounds_of_the_rule() -> None:
    s = ModelScaler(RULE)
    assert s.decide(100, False, ["a", "b", "c"], {}, now_s=0) == Decision(3)
    assert s.decide(0, False, ["a"], {}, now_s=100) == Decision(1)


def test_a_waiting_request_at_zero_starts_one() -> None:
    s = ModelScaler(ScalingRule(0, 2, 4, 10.0))
    assert s.decide(0, True, [], {}, now_s=0) == Decision(1, start=1)
    assert s.decide(0, False, [], {}, now_s=100) == Decision(0)


def test_no_start_when_the_next_replica_does_not_fit() -> None:
    s = ModelScaler(RULE)
    assert s.decide(6, False, ["m-0"], {}, now_s=0, fits=False) == Decision(3, start=0, refused=True)


def test_idlest_is_the_least_in_flight_and_the_last_on_a_tie() -> None:
    assert idlest({"a": 2, "b": 0, "c": 1}, ["a", "b", "c"]) == "b"
    assert idlest({}, ["a", "b"]) == "b"
