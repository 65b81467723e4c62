"""Least in-flight: the lowest live load, ties to the lowest id."""

from __future__ import annotations

import random

from gateway.replicas.table import Endpoint
from gateway.routing.base import PolicyOptions, RouteRequest
from gateway.routing.least_inflight import LeastInflight
from llmgw_contract.registry import ReplicaRecord


def ep(rid: str, inflight: int = 0, waiting: int = 0) -> Endpoint:
    return Endpoint(ReplicaRecord(id=rid, model="m", url="http://x"), inflight=inflight, waiting=waiting)


def test_picks_lowest_load() -> None:
    cands = [ep("a", inflight=3), ep("b", inflight=1), ep("c", inflight=2)]
    assert LeastInflight(PolicyOptions()).pick(cands, RouteRequest()).id == "b"


def test_load_counts_waiting_in_vllm() -> None:
    cands = [ep("a", inflight=1, waiting=5), ep("b", inflight=4)]
    assert LeastInflight(PolicyOptions()).pick(cands, RouteRequest()).id == "b"


def test_ties_go_to_lowest_id_whatever_the_order() -> None:
    policy = LeastInflight(PolicyOptions())
    cands = [ep("c", 1), ep("a", 1), ep("b", 1), ep("d", 2)]
    rng = random.Random(0)
    for _ in range(20):
        rng.shuffle(cands)
        assert policy.pick(cands, RouteRequest()).id == "a"


def test_spreads_as_load_is_counted() -> None:
    cands = [ep("a"), ep("b"), ep("c")]
    policy = LeastInflight(PolicyOptions())
    for _ in range(9):
        policy.pick(cands, RouteRequest()).inflight += 1
    assert [e.inflight for e in cands] == [3, 3, 3]


def test_single_candidate() -> None:
    only = ep("a", inflight=50)
    assert LeastInflight(PolicyOptions()).pick([only], RouteRequest()) is only
