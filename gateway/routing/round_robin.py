"""Round robin: each request to the next ready replica in turn."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.replicas.table import Endpoint
from gateway.routing.base import Policy, PolicyOptions, RouteRequest


class RoundRobin(Policy):
    name = "round_robin"

    def __init__(self, options: PolicyOptions) -> None:
        super().__init__(options)
        self._next = 0

    def pick(self, candidates: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        chosen = candidates[self._next % len(candidates)]
        self._next += 1
        return chosen
