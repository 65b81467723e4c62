"""Routing policies: one per module behind :class:`~gateway.routing.base.Policy`, one registry."""

from gateway.routing.base import Policy, PolicyOptions, RouteRequest
from gateway.routing.registry import POLICIES, build_policy, load_routable_fleet

__all__ = ["POLICIES", "Policy", "PolicyOptions", "RouteRequest", "build_policy", "load_routable_fleet"]
