"""Session affinity: sticky by session key via rendezvous hashing; no key, least loaded."""

from __future__ import annotations

from collections import Counter

from gateway.replicas.table import Endpoint
from gateway.routing.base import PolicyOptions, RouteRequest
from gateway.routing.rendezvous import rank
from gateway.routing.session import SessionAffinity
from llmgw_contract.registry import ReplicaRecord


def ep(rid: str, inflight: int = 0, waiting: int = 0) -> Endpoint:
    return Endpoint(ReplicaRecord(id=rid, model="m", url="http://x"), inflight=inflight, waiting=waiting)


def pool(n: int) -> list[Endpoint]:
    return [ep(f"replica-{i}") for i in range(n)]


def test_same_key_is_sticky_whatever_the_load() -> None:
    cands = pool(4)
    policy = SessionAffinity(PolicyOptions())
    req = RouteRequest(session_key="user-123")
    first = policy.pick(cands, req)
    for _ in range(10):
        first.inflight += 5
        assert policy.pick(cands, req) is first


def test_two_gateways_agree() -> None:
    a, b = SessionAffinity(PolicyOptions()), SessionAffinity(PolicyOptions())
    cands_a, cands_b = pool(5), list(reversed(pool(5)))
    for i in range(50):
        req = RouteRequest(session_key=f"s{i}")
        assert a.pick(cands_a, req).id == b.pick(cands_b, req).id


def test_missing_key_goes_to_least_loaded() -> None:
    cands = [ep("a", 4), ep("b", 1), ep("c", 1), ep("d", 3)]
    policy = SessionAffinity(PolicyOptions())
    assert policy.pick(cands, RouteRequest(session_key=None)).id == "b"
    assert policy.pick(cands, RouteRequest(session_key="")).id == "b"


def test_missing_sticky_replica_falls_to_next_in_ranking_and_back() -> None:
    cands = pool(4)
    policy = SessionAffinity(PolicyOptions())
    req = RouteRequest(session_key="alice")
    ranking = rank(b"alice", cands)
    assert policy.pick(cands, req) is ranking[0]
    without_first = [e for e in cands if e is not ranking[0]]
    assert policy.pick(without_first, req) is ranking[1]
    without_two = [e for e in without_first if e is not ranking[1]]
    assert policy.pick(without_two, req) is ranking[2]
    assert policy.pick(cands, req) is ranking[0]


def test_sessions_spread_over_replicas() -> None:
    cands = pool(3)
    policy = SessionAffinity(PolicyOptions())
    counts = Counter(policy.pick(cands, RouteRequest(session_key=f"sess-{i}")).id for i in range(900))
    assert set(counts) == {e.id for e in cands}
    assert all(200 <= c <= 400 for c in counts.values())


def test_non_ascii_and_surrogate_keys() -> None:
    cands = pool(3)
    policy = SessionAffinity(PolicyOptions())
    for key in ("żółw", "\ud800bad", "🙂"):
        req = RouteRequest(session_key=key)
        assert policy.pick(cands, req) is policy.pick(cands, req)
