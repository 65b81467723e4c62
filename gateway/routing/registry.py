"""The one registry of routing policies: a new policy is one module plus one entry here."""

from __future__ import annotations

from gateway.routing.base import Policy, PolicyOptions
from gateway.routing.least_inflight import LeastInflight
from gateway.routing.power_of_two import PowerOfTwo
from gateway.routing.prefix.affinity import PrefixAffinity
from gateway.routing.round_robin import RoundRobin
from gateway.routing.session import SessionAffinity
from llmgw_contract.fleet_file import check_policies, read_fleet

POLICIES: dict[str, type[Policy]] = {
    RoundRobin.name: RoundRobin,
    LeastInflight.name: LeastInflight,
    PowerOfTwo.name: PowerOfTwo,
    SessionAffinity.name: SessionAffinity,
    PrefixAffinity.name: PrefixAffinity,
}


def build_policy(name: str, options: PolicyOptions) -> Policy:
    policy = POLICIES.get(name)
    if policy is None:
        raise ValueError(f"unknown routing policy {name!r}; known: {sorted(POLICIES)}")
    return policy(options)


load_routable_fleet = read_fleet
""":func:`llmgw_contract.fleet_file.read_fleet`: what the gateway, ``llmgw-fleet`` and the workers accept."""
__all__ = ["POLICIES", "build_policy", "check_policies", "load_routable_fleet"]
