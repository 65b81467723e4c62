"""The one registry of routing policies: a new policy is one module plus one entry here."""

from __future__ import annotations

from pathlib import Path

from contract.fleet import Fleet, FleetError, load_fleet
from gateway.routing.base import Policy, PolicyOptions
from gateway.routing.least_inflight import LeastInflight
from gateway.routing.power_of_two import PowerOfTwo
from gateway.routing.prefix.affinity import PrefixAffinity
from gateway.routing.round_robin import RoundRobin
from gateway.routing.session import SessionAffinity

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


def check_policies(fleet: Fleet, origin: str = "<fleet>") -> Fleet:
    """The fleet, once every model's policy is a registered one; else FleetError naming the field."""
    unknown = [f"  models.{i}.policy: unknown routing policy {m.policy!r}; known: {sorted(POLICIES)}"
               for i, m in enumerate(fleet.models) if m.policy not in POLICIES]  # fmt: skip
    if unknown:
        raise FleetError(f"{origin}: invalid fleet file:\n" + "\n".join(unknown))
    return fleet


def load_routable_fleet(path: Path) -> Fleet:
    """:func:`load_fleet` plus the routing check: what the gateway and ``llmgw-fleet`` accept."""
    return check_policies(load_fleet(path), str(path))
