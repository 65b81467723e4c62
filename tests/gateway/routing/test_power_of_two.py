"""Power of two choices: of two distinct random replicas, the less loaded; seedable."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.replicas.table import Endpoint
from gateway.routing.base import PolicyOptions, RouteRequest
from gateway.routing.power_of_two import PowerOfTwo
from llmgw_contract.registry import ReplicaRecord


def ep(rid: str, inflight: int = 0, waiting: int = 0) -> Endpoint:
    return Endpoint(ReplicaRecord(id=rid, model="m", url="http://x"), inflight=inflight, waiting=waiting)


@settings(max_examples=60, deadline=None)
@given(
    loads=st.lists(st.integers(0, 20), min_size=2, max_size=8),
    seed=st.integers(0, 2**32),
)
def test_never_picks_the_more_loaded_of_the_two_sampled(loads: list[int], seed: int) -> None:
    cands = [ep(f"r{i}", inflight=load) for i, load in enumerate(loads)]
    policy = PowerOfTwo(PolicyOptions(seed=seed))
    shadow = random.Random(seed)  # replays the policy's samples
    for _ in range(20):
        i, j = shadow.sample(range(len(cands)), 2)
        assert i != j
        chosen = policy.pick(cands, RouteRequest())
        assert chosen in (cands[i], cands[j])
        assert chosen.load == min(cands[i].load, cands[j].load)


def test_two_replicas_always_the_less_loaded() -> None:
    cands = [ep("a", inflight=5), ep("b", inflight=2)]
    policy = PowerOfTwo(PolicyOptions(seed=1))
    assert all(policy.pick(cands, RouteRequest()).id == "b" for _ in range(50))


def test_unique_most_loaded_is_never_picked() -> None:
    cands = [ep("a", 1), ep("b", 9), ep("c", 2), ep("d", 0)]
    policy = PowerOfTwo(PolicyOptions(seed=7))
    picks = {policy.pick(cands, RouteRequest()).id for _ in range(200)}
    assert "b" not in picks
    assert picks == {"a", "c", "d"}


def test_same_seed_same_sequence() -> None:
    cands = [ep(f"r{i}") for i in range(5)]
    one, two = PowerOfTwo(PolicyOptions(seed=42)), PowerOfTwo(PolicyOptions(seed=42))
    assert [one.pick(cands, RouteRequest()).id for _ in range(30)] == [
        two.pick(cands, RouteRequest()).id for _ in range(30)
    ]


def test_single_candidate() -> None:
    only = ep("a", inflight=3)
    assert PowerOfTwo(PolicyOptions(seed=0)).pick([only], RouteRequest()) is only


def test_balances_idle_pool_under_arrivals() -> None:
    cands = [ep(f"r{i}") for i in range(4)]
    policy = PowerOfTwo(PolicyOptions(seed=3))
    for _ in range(400):
        policy.pick(cands, RouteRequest()).inflight += 1
    loads = [e.load for e in cands]
    assert max(loads) - min(loads) <= 3
