"""The registry: every policy the fleet file may name is registered; callers treat them all alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError

from gateway.app import policy_options
from gateway.pool import Endpoint
from gateway.replica import ReplicaRecord
from gateway.routing.base import Policy, PolicyOptions, RouteRequest
from gateway.routing.registry import POLICIES, build_policy
from gateway.settings import GatewaySettings
from workers.fleet import Fleet, PolicyName

NAMES = get_args(PolicyName)


def ep(rid: str, inflight: int = 0) -> Endpoint:
    return Endpoint(ReplicaRecord(id=rid, model="m", url="http://x"), inflight=inflight)


def test_every_fleet_policy_name_is_registered() -> None:
    assert NAMES
    assert set(NAMES) <= set(POLICIES)


def test_registered_names_match_their_class() -> None:
    for name, cls in POLICIES.items():
        assert cls.name == name


def test_unknown_name_raises_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="nope") as info:
        build_policy("nope", PolicyOptions())
    for name in POLICIES:
        assert name in str(info.value)


@pytest.mark.parametrize("name", NAMES)
def test_every_policy_picks_a_candidate_through_the_one_interface(name: str) -> None:
    policy = build_policy(name, PolicyOptions(epsilon=0.25, seed=0))
    assert isinstance(policy, Policy)
    cands = [ep("a", 2), ep("b", 0), ep("c", 1)]
    requests = [
        RouteRequest(),
        RouteRequest(prefix_key=b"system prompt", session_key="s1"),
        RouteRequest(prefix_key=b"x", session_key=None),
    ]
    for request in requests:
        chosen = policy.pick(cands, request)
        assert chosen in cands
        policy.on_start(chosen, request)
        policy.on_finish(chosen, request, True)
        assert policy.pick(cands[:1], request) is cands[0]


def test_a_models_own_epsilon_wins_over_the_gateways(tmp_path: Path) -> None:
    models = [
        {"name": "a", "endpoints": ["http://x"], "epsilon": 1.5},
        {"name": "b", "endpoints": ["http://y"]},
    ]
    fleet = Fleet.model_validate({"models": models})
    (tmp_path / "fleet.yaml").write_text(json.dumps({"models": models}))  # settings check that it exists
    settings = GatewaySettings(fleet_file=tmp_path / "fleet.yaml", prefix_epsilon=0.5)
    assert [policy_options(m, settings).epsilon for m in fleet.models] == [1.5, 0.5]


def test_a_negative_epsilon_is_refused_by_the_fleet_file() -> None:
    with pytest.raises(ValidationError, match="epsilon"):
        Fleet.model_validate({"models": [{"name": "a", "endpoints": ["http://x"], "epsilon": -0.1}]})
