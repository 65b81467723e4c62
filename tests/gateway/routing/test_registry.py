"""The registry: every policy the fleet file may name is registered; callers treat them all alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.replicas.table import Endpoint
from gateway.routing.base import Policy, PolicyOptions, RouteRequest
from gateway.routing.factory import PolicyFactory
from gateway.routing.registry import POLICIES, build_policy, check_policies
from gateway.settings import GatewaySettings
from llmgw_contract.fleet import Fleet, FleetError, parse_fleet
from llmgw_contract.registry import ReplicaRecord

NAMES = sorted(POLICIES)


def ep(rid: str, inflight: int = 0) -> Endpoint:
    return Endpoint(ReplicaRecord(id=rid, model="m", url="http://x"), inflight=inflight)


def test_a_fleet_naming_an_unregistered_policy_is_refused_with_the_known_ones() -> None:
    fleet = parse_fleet("models: [{name: a, endpoints: [{url: 'http://x', auth: none}], policy: fastest}]")
    with pytest.raises(FleetError, match=r"models\.0\.policy: unknown routing policy 'fastest'") as info:
        check_policies(fleet)
    for name in POLICIES:
        assert name in str(info.value)


def test_every_registered_policy_is_accepted_by_the_fleet_check() -> None:
    for name in NAMES:
        fleet = parse_fleet(
            f"models: [{{name: a, endpoints: [{{url: 'http://x', auth: none}}], policy: {name}}}]"
        )
        assert check_policies(fleet).models[0].policy == name


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
        {"name": "a", "endpoints": [{"url": "http://x", "auth": "none"}], "epsilon": 1.5},
        {"name": "b", "endpoints": [{"url": "http://y", "auth": "none"}]},
    ]
    fleet = Fleet.model_validate({"models": models})
    (tmp_path / "fleet.yaml").write_text(json.dumps({"models": models}))  # settings check that it exists
    settings = GatewaySettings(fleet_file=tmp_path / "fleet.yaml", prefix_epsilon=0.5)
    assert [PolicyFactory(settings, None).options(m).epsilon for m in fleet.models] == [1.5, 0.5]


def test_a_negative_epsilon_is_refused_by_the_fleet_file() -> None:
    with pytest.raises(ValidationError, match="epsilon"):
        Fleet.model_validate(
            {"models": [{"name": "a", "endpoints": [{"url": "http://x", "auth": "none"}], "epsilon": -0.1}]}
        )


async def test_a_policy_that_does_not_read_the_prompt_picks_the_same_without_its_keys() -> None:
    """``Policy.reads_prompt`` false: the request path computes no prefix key or chain for the policy's
    models (gateway/pipeline/proxy.py), so its picks must be the same without them."""
    full = RouteRequest(prefix_key=b"k" * 16, session_key="s", chain=("a", "b"))
    bare = RouteRequest(session_key="s")
    assert POLICIES["prefix_affinity"].reads_prompt
    for name, cls in POLICIES.items():
        if cls.reads_prompt:
            continue
        a, b = build_policy(name, PolicyOptions(seed=1)), build_policy(name, PolicyOptions(seed=1))
        eps = [ep(f"r{i}", inflight=i % 2) for i in range(4)]
        for _ in range(8):
            assert (await a.route(eps, full)).id == (await b.route(eps, bare)).id, name
