"""The replay of :mod:`bench.routing_bound`: the default bounds keep the hit rate and the shares together on
two replicas where the in-flight bound alone cannot (pure: the reference index, simulated loads)."""

from __future__ import annotations

import pytest

from bench.routing_bound import (
    RULES,
    Rule,
    conversation_requests,
    one_prompt_requests,
    replay,
    template_requests,
)

DEFAULT = next(r for r in RULES if "default" in r.name)
INFLIGHT_LOOSE = Rule("in flight ε 1", 1.0, None)


@pytest.mark.parametrize("hold", [2, 4, 8])
def test_default_bounds_keep_hits_and_shares_on_conversations_and_templates(hold: int) -> None:
    for reqs in (conversation_requests(16, 6, 1), template_requests(4, 40, 1)):
        hit, shares, _ = replay(reqs, hold, DEFAULT)
        assert hit >= 0.98
        assert all(abs(s - 0.5) <= 0.075 for s in shares)


def test_one_hot_system_prompt_is_spread_by_the_share_bound_only() -> None:
    reqs = one_prompt_requests(160, 1)
    _, loose, _ = replay(reqs, 4, INFLIGHT_LOOSE)
    assert max(loose) == 1.0  # nothing moves it: every request on one replica
    hit, shares, outcomes = replay(reqs, 4, DEFAULT)
    assert all(abs(s - 0.5) <= 0.075 for s in shares)
    assert hit >= 0.98 and outcomes["moved"] >= 1
