"""Least in-flight: the replica with the lowest live load (in flight here plus waiting in vLLM).

Ties go to the lowest replica id, a rule every gateway replica applies the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.replicas.table import Endpoint
from gateway.routing.base import Policy, RouteRequest


def least_loaded_stable(candidates: Sequence[Endpoint]) -> Endpoint:
    """The endpoint with the lowest live load; ties to the lowest id, whatever the candidates' order."""
    return min(candidates, key=lambda e: (e.load, e.id))


class LeastInflight(Policy):
    name = "least_inflight"

    def pick(self, candidates: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        return least_loaded_stable(candidates)
