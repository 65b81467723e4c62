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


@pytest.mark.parametrize("gateways", [1, 2, 4])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_eight_documents_split_evenly_through_several_gateways(gateways: int, seed: int) -> None:
    """The 4-gateway run's 62/38 (8 documents × 12 questions): the cold placements of the 8 documents
    came out 5 + 3, within the share bound's 62.5 %, so nothing corrected them. Every gateway here
    decides from its own view of the loads (the others' published every 4 arrivals), the index shared."""
    reqs = template_requests(8, 12, seed)
    for hold in (2, 4, 8):
        hit, shares, _ = replay(reqs, hold, DEFAULT, gateways, refresh=4)
        assert all(abs(s - 0.5) <= 0.075 for s in shares), (hold, shares)
        assert hit >= 0.98, (hold, hit)
