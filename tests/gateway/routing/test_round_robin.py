"""Round robin: each pick is the next candidate in turn."""

from __future__ import annotations

from gateway.replicas.table import Endpoint
from gateway.routing.base import PolicyOptions, RouteRequest
from gateway.routing.round_robin import RoundRobin
from llmgw_contract.registry import ReplicaRecord


def ep(rid: str, inflight: int = 0, waiting: int = 0) -> Endpoint:
    return Endpoint(ReplicaRecord(id=rid, model="m", url="http://x"), inflight=inflight, waiting=waiting)


def test_cycles_through_candidates_in_order() -> None:
    cands = [ep("a"), ep("b"), ep("c")]
    policy = RoundRobin(PolicyOptions())
    picks = [policy.pick(cands, RouteRequest()).id for _ in range(7)]
    assert picks == ["a", "b", "c", "a", "b", "c", "a"]


def test_ignores_load_and_keys() -> None:
    cands = [ep("a", inflight=100), ep("b")]
    policy = RoundRobin(PolicyOptions())
    picks = [policy.pick(cands, RouteRequest(prefix_key=b"k", session_key="s")).id for _ in range(4)]
    assert picks == ["a", "b", "a", "b"]


def test_shrinking_candidate_list_stays_in_range() -> None:
    policy = RoundRobin(PolicyOptions())
    three = [ep("a"), ep("b"), ep("c")]
    one = [ep("z")]
    for _ in range(5):
        assert policy.pick(three, RouteRequest()) in three
        assert policy.pick(one, RouteRequest()) is one[0]
