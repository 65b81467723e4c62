"""Power of two choices: sample two distinct replicas at random, send to the one with less live load.

The random source is ``random.Random(options.seed)``, so a seeded policy replays the same samples. Of the
two sampled, the less loaded wins; on equal load, the first sampled. With one candidate, that one.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from gateway.replicas.table import Endpoint
from gateway.routing.base import Policy, PolicyOptions, RouteRequest


class PowerOfTwo(Policy):
    name = "power_of_two"

    def __init__(self, options: PolicyOptions) -> None:
        super().__init__(options)
        self._rng = random.Random(options.seed)

    def pick(self, candidates: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        if len(candidates) == 1:
            return candidates[0]
        i, j = self._rng.sample(range(len(candidates)), 2)
        a, b = candidates[i], candidates[j]
        return b if b.load < a.load else a
