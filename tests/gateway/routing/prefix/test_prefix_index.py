"""The pure prefix index and its decision: longest match, LRU bound per replica, restarts, the bound."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.routing.prefix.chain import chain_keys
from gateway.routing.prefix.index import (
    Decision,
    PickInput,
    PrefixIndex,
    ReplicaView,
    accepts,
    bound_ratio,
    capacity_keys,
    decide,
    least_loaded,
    share_window,
)

R = bound_ratio(0.25)


def views(loads: dict[str, int], cap: int = 100, inst: str = "i1") -> tuple[ReplicaView, ...]:
    return tuple(ReplicaView(rid, inst, load, cap) for rid, load in loads.items())


def pick(idx: PrefixIndex, chain: tuple[str, ...], loads: dict[str, int], **kw: object) -> Decision:
    session = kw.pop("session", None)
    assert session is None or isinstance(session, str)
    return idx.pick(PickInput(chain, views(loads, **kw), R, session))  # type: ignore[arg-type]


def test_cold_prefix_goes_to_the_least_loaded_and_is_recorded() -> None:
    idx = PrefixIndex()
    d = pick(idx, ("k1", "k2"), {"a": 3, "b": 1, "c": 2})
    assert d == Decision("b", "cold", 0)
    assert idx.holders == {"k1": ["b"], "k2": ["b"]}
    assert idx.lru["b"] == {"k1": 1, "k2": 1}


def test_a_detour_places_nothing_and_the_prefix_stays_where_it_was_placed() -> None:
    """A retry or a migration away from the holder (the candidates exclude it) goes elsewhere, but the
    document keeps its one holder: under cache pressure a stalled stream must not leave it on both."""
    idx = PrefixIndex()
    assert pick(idx, ("doc", "doc-q1"), {"a": 0, "b": 1}, session="s") == Decision("a", "cold", 0)
    holders, lru, sessions = {k: list(v) for k, v in idx.holders.items()}, dict(idx.lru), dict(idx.sessions)
    detour = idx.pick(PickInput(("doc", "doc-q2"), views({"b": 0}), R, "s", detour=True))
    assert detour == Decision("b", "cold", 0)
    assert (idx.holders, idx.lru, idx.sessions) == (holders, lru, sessions)
    assert idx.recent == ["b", "a"]  # it still counts toward b's share
    assert pick(idx, ("doc", "doc-q3"), {"a": 0, "b": 0}) == Decision("a", "hit", 1)


def test_cold_prefix_goes_to_the_replica_holding_fewer_keys_whatever_the_loads() -> None:
    """Placement by keys held (shared, read with the pick), not by a gateway's own view of the loads:
    8 documents arriving while the loads swing still split 4 + 4."""
    idx = PrefixIndex()
    for d in range(8):
        loads = {"a": d % 3, "b": (d + 1) % 2}  # whatever one gateway happens to see
        pick(idx, (f"doc{d}", f"doc{d}q"), loads)
    assert len(idx.lru["a"]) == len(idx.lru["b"]) == 8
    same = {"a": "i1", "b": "i1"}
    idx = PrefixIndex(lru={"a": {"x": 1, "y": 2}, "b": {"z": 3}}, instances=dict(same))
    assert pick(idx, ("new",), {"a": 1, "b": 2}) == Decision("b", "cold", 0)
    # b over the in-flight bound: a, though it holds more
    idx = PrefixIndex(lru={"a": {"x": 1, "y": 2}, "b": {}}, instances=dict(same))
    assert pick(idx, ("new",), {"a": 0, "b": 9}) == Decision("a", "cold", 0)


def test_longest_match_wins() -> None:
    idx = PrefixIndex()
    pick(idx, ("s1", "s2"), {"a": 0, "b": 5})  # a holds the shared system prompt
    pick(idx, ("s1", "s2", "c1", "c2"), {"a": 5, "b": 0, "c": 5})  # a is over the bound: moves to b
    assert idx.holders["s1"] == ["b", "a"] and idx.holders["c2"] == ["b"]
    d = pick(idx, ("s1", "s2", "c1", "c2", "c3"), {"a": 1, "b": 1})
    assert d == Decision("b", "hit", 4)
    d = pick(idx, ("s1", "x"), {"a": 1, "b": 1})
    assert d == Decision("a", "hit", 1)  # both hold s1: a has the smaller recent share (1 pick against 2)


def test_among_holders_the_smaller_recent_share_then_the_lesser_load_then_the_latest_placed() -> None:
    idx = PrefixIndex(holders={"p": ["b", "a"]}, recent=["a", "b", "b"])
    assert pick(idx, ("p",), {"a": 1, "b": 0}) == Decision("a", "hit", 1)
    idx = PrefixIndex(holders={"p": ["b", "a"]}, recent=["a", "b"])
    assert pick(idx, ("p",), {"a": 0, "b": 1}) == Decision("a", "hit", 1)
    idx = PrefixIndex(holders={"p": ["b", "a"]}, recent=["a", "b"])
    assert pick(idx, ("p",), {"a": 1, "b": 1}) == Decision("b", "hit", 1)


def test_holder_over_the_bound_moves_the_placement_to_the_least_loaded() -> None:
    idx = PrefixIndex()
    pick(idx, ("p",), {"a": 0, "b": 0, "c": 0})
    holder = idx.holders["p"][0]
    loads = {"a": 1, "b": 1, "c": 1, holder: 4}  # total 7, 4·4 < 1.25·8 is false
    d = pick(idx, ("p", "q"), loads)
    assert d.outcome == "moved" and d.depth == 1 and d.replica != holder
    assert idx.holders["p"][0] == d.replica and holder in idx.holders["p"]
    # later turns follow the new placement
    assert pick(idx, ("p", "q", "r"), dict.fromkeys(loads, 1)) == Decision(d.replica, "hit", 2)


def test_second_holder_within_bound_is_a_hit() -> None:
    idx = PrefixIndex(holders={"p": ["a", "b"]})
    assert pick(idx, ("p",), {"a": 9, "b": 0, "c": 0}) == Decision("b", "hit", 1)


def test_holders_that_are_not_candidates_are_skipped() -> None:
    idx = PrefixIndex(holders={"p": ["gone"], "p2": ["gone"]})
    assert pick(idx, ("p", "p2"), {"a": 0}) == Decision("a", "cold", 0)
    idx = PrefixIndex(holders={"p": ["a"], "p2": ["gone"]})
    assert pick(idx, ("p", "p2"), {"a": 0, "b": 0}) == Decision("a", "hit", 1)


def test_session_prefers_its_last_replica_within_the_bound() -> None:
    idx = PrefixIndex()
    first = pick(idx, ("x",), {"a": 0, "b": 0}, session="s")
    other = "b" if first.replica == "a" else "a"
    idx.holders["y"] = [other]
    assert pick(idx, ("y",), {"a": 0, "b": 0}, session="s") == Decision(first.replica, "session", 1)
    assert idx.holders["y"][0] == first.replica  # the index still records the placement
    # over the bound: the prefix decides
    d = pick(idx, ("z",), {first.replica: 5, other: 0}, session="s")
    assert d.replica == other and idx.sessions["s"] == other


def test_lru_bound_per_replica() -> None:
    idx = PrefixIndex()
    pick(idx, ("a1", "a2"), {"r": 0}, cap=3)
    pick(idx, ("b1",), {"r": 0}, cap=3)
    pick(idx, ("a1", "a2", "a3"), {"r": 0}, cap=3)  # touches a1, a2: b1 is now the oldest
    assert set(idx.lru["r"]) == {"a1", "a2", "a3"}
    assert "b1" not in idx.holders
    pick(idx, ("c1", "c2"), {"r": 0}, cap=3)  # drops the two oldest of the same tick, smallest key first
    assert set(idx.lru["r"]) == {"a3", "c1", "c2"}
    assert set(idx.holders) == {"a3", "c1", "c2"}


def test_eviction_on_one_replica_keeps_the_others_holding() -> None:
    idx = PrefixIndex(holders={"k": ["a", "b"]}, lru={"a": {"k": 1}, "b": {"k": 1}}, instances={"a": "i1"})
    idx.instances["b"] = "i1"
    pick(idx, ("n1", "n2"), {"a": 0, "b": 9}, cap=2)  # a: k is evicted
    assert idx.holders["k"] == ["b"]


def test_restart_drops_the_replicas_entries() -> None:
    idx = PrefixIndex()
    pick(idx, ("k1", "k2"), {"a": 0, "b": 1})
    pick(idx, ("m1",), {"a": 1, "b": 0})
    assert idx.holders == {"k1": ["a"], "k2": ["a"], "m1": ["b"]}
    d = idx.pick(PickInput(("k1", "k2"), (ReplicaView("a", "i2", 0, 100), ReplicaView("b", "i1", 1, 100)), R))
    assert d == Decision("a", "cold", 0)  # a restarted: it no longer holds k1, k2 (then records them)
    assert idx.holders["m1"] == ["b"] and idx.instances["a"] == "i2"


def test_replica_leaving_drops_its_entries() -> None:
    idx = PrefixIndex()
    pick(idx, ("k1",), {"a": 0, "b": 1})
    pick(idx, ("k2",), {"a": 1, "b": 0})
    assert idx.forget_absent({"b"}) == ["a"]
    assert idx.holders == {"k2": ["b"]} and "a" not in idx.lru and "a" not in idx.instances


def test_idle_replicas_share_cold_prefixes() -> None:
    reps = views({f"r{i}": 0 for i in range(4)})
    firsts = {least_loaded(reps, chain_keys(f"doc {i}".encode(), 8, 1)[0], {}).id for i in range(40)}
    assert firsts == {"r0", "r1", "r2", "r3"}


def test_no_chain_goes_to_the_least_loaded() -> None:
    idx = PrefixIndex()
    assert pick(idx, (), {"a": 2, "b": 1}) == Decision("b", "cold", 0)
    assert idx.holders == {} and idx.clock == 0


def test_capacity_rule() -> None:
    assert capacity_keys(23_000, 512) == 23_000 * 8 // 512
    assert capacity_keys(23_000, 512, 4) == 23_000 * 4 // 512
    assert capacity_keys(0, 512) == 1


@pytest.mark.parametrize(
    ("eps", "ratio"), [(0.25, (5, 4)), (0.0, (1, 1)), (math.inf, (1, 0)), (0.1, (11, 10))]
)
def test_bound_ratio(eps: float, ratio: tuple[int, int]) -> None:
    assert bound_ratio(eps) == ratio


@pytest.mark.parametrize("eps", [-0.1, math.nan])
def test_invalid_epsilon(eps: float) -> None:
    with pytest.raises(ValueError, match="epsilon"):
        bound_ratio(eps)


# -- the share bound over the recent picks -------------------------------------------------------------

S = bound_ratio(0.25)


def share_pick(idx: PrefixIndex, chain: tuple[str, ...], loads: dict[str, int], window: int = 64) -> Decision:
    """A pick with the share bound (ε 0.25) and the in-flight bound unbounded."""
    return idx.pick(PickInput(chain, views(loads), bound_ratio(math.inf), None, S, window))


def test_holder_over_its_recent_share_moves_the_placement() -> None:
    idx = PrefixIndex(holders={"p": ["a"]}, recent=["a"] * 6 + ["b"] * 2)  # a: 6 of 8, 6·4·2 >= 5·9
    d = share_pick(idx, ("p", "q"), {"a": 0, "b": 0})
    assert d == Decision("b", "moved", 1)
    assert idx.holders["p"] == ["b", "a"] and idx.recent[0] == "b"


def test_holder_within_its_recent_share_keeps_the_request_whatever_its_in_flight() -> None:
    idx = PrefixIndex(holders={"p": ["a"]}, recent=["a", "b"] * 4)
    assert share_pick(idx, ("p",), {"a": 7, "b": 0}) == Decision("a", "hit", 1)


def test_equally_loaded_replicas_place_a_cold_prefix_by_recent_share() -> None:
    idx = PrefixIndex(recent=["a", "a", "b"])
    assert share_pick(idx, ("new",), {"a": 1, "b": 1}) == Decision("b", "cold", 0)


def test_recent_picks_are_a_window() -> None:
    idx = PrefixIndex()
    for i in range(10):
        share_pick(idx, (f"k{i}",), {"a": 0, "b": 0}, window=4)
    assert len(idx.recent) == 4


def test_one_hot_prefix_is_shared_by_the_replicas() -> None:
    """Every request starts with one system prompt: the share bound spreads it, so both replicas hold it
    and neither takes more than (1 + ε) / n of any window."""
    idx = PrefixIndex()
    for i in range(200):
        share_pick(idx, ("system", f"q{i}"), {"a": 0, "b": 0})
        counts = {r: idx.recent.count(r) for r in ("a", "b")}
        assert max(counts.values()) <= math.ceil(Fraction(5, 4) * Fraction(len(idx.recent), 2)) + 1
    assert sorted(idx.holders["system"]) == ["a", "b"]


def test_placement_corrects_an_unlucky_split() -> None:
    """Four equally popular documents placed 3 + 1: the share bound moves one, shares come back to ~1/2."""
    idx = PrefixIndex(holders={"d0": ["a"], "d1": ["a"], "d2": ["a"], "d3": ["b"]})
    placed = [share_pick(idx, (f"d{i % 4}", f"q{i}"), {"a": 0, "b": 0}).replica for i in range(400)]
    assert abs(placed[100:].count("a") / 300 - 0.5) < 0.075
    assert sum(1 for i in range(4) if idx.holders[f"d{i}"][0] == "a") == 2


# -- the load bound, property-tested -----------------------------------------------------------------

chains = st.lists(st.sampled_from(["s", "t", "u", "v"]), max_size=4).map(tuple)
events = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), chains, st.sampled_from([None, "s1", "s2"])),
        st.tuples(st.just("depart"), st.integers(0, 7), st.none()),
    ),
    max_size=80,
)


def over(load: int, loads: list[int], eps: float) -> bool:
    """load > (1 + ε) · mean + 1, exactly, mean over the current loads."""
    return load > (1 + Fraction(eps)) * Fraction(sum(loads), len(loads)) + 1


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 8),
    eps=st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0]),
    start=st.lists(st.integers(0, 12), min_size=8, max_size=8),
    script=events,
)
def test_no_pick_puts_a_replica_over_the_bound(
    n: int, eps: float, start: list[int], script: list[tuple[str, object, object]]
) -> None:
    """The chosen replica then holds at most ⌈(1 + ε) · mean⌉ (mean including the new request), and a
    placement never pushes any replica over (1 + ε) · mean + 1: whatever the index says."""
    loads = {f"r{i}": start[i] for i in range(n)}
    idx = PrefixIndex()
    ratio = bound_ratio(eps)
    for kind, arg, session in script:
        if kind == "depart":
            assert isinstance(arg, int)
            rid = f"r{arg % n}"
            loads[rid] = max(0, loads[rid] - 1)
            continue
        assert isinstance(arg, tuple) and (session is None or isinstance(session, str))
        before = {r for r, x in loads.items() if over(x, list(loads.values()), eps)}
        d = idx.pick(PickInput(arg, views(loads), ratio, session))
        loads[d.replica] += 1
        mean = Fraction(sum(loads.values()), n)
        assert loads[d.replica] <= math.ceil(Fraction(*ratio) * mean)
        assert {r for r, x in loads.items() if over(x, list(loads.values()), eps)} <= before


@settings(max_examples=100, deadline=None)
@given(
    loads=st.lists(st.integers(0, 10), min_size=1, max_size=8),
    held=st.lists(st.lists(st.integers(0, 9), max_size=3), max_size=4),
    session=st.one_of(st.none(), st.integers(0, 9)),
)
def test_decide_ignores_candidate_order(loads: list[int], held: list[list[int]], session: int | None) -> None:
    reps = views({f"r{i}": x for i, x in enumerate(loads)})
    chain = tuple(f"k{j}" for j in range(len(held)))
    holders = [[f"r{h}" for h in hs] for hs in held]
    s = None if session is None else f"r{session}"
    recent = [f"r{i % 10}" for i in range(len(loads) * 3)]
    one = decide(PickInput(chain, reps, R, None, S), holders, s, recent)
    two = decide(PickInput(chain, tuple(reversed(reps)), R, None, S), holders, s, recent)
    assert one == two


def share_over(count: int, counts: list[int], eps: float) -> bool:
    return count > (1 + Fraction(eps)) * Fraction(sum(counts), len(counts)) + 1


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 6),
    eps=st.sampled_from([0.0, 0.25, 0.5]),
    inflight_eps=st.sampled_from([0.25, 1.0, math.inf]),
    window=st.integers(1, 12),
    start=st.lists(st.integers(0, 5), min_size=6, max_size=6),
    script=events,
)
def test_the_share_and_in_flight_bounds(
    n: int,
    eps: float,
    inflight_eps: float,
    window: int,
    start: list[int],
    script: list[tuple[str, object, object]],
) -> None:
    """Every pick keeps the in-flight bound (as above); it keeps the share bound (the chosen replica's
    count in the window, counting this pick, at most ⌈(1 + ε) · mean⌉) whenever some candidate passes
    both bounds, and then no replica goes over (1 + ε) · mean + 1 of the window by this pick."""
    ids = [f"r{i}" for i in range(n)]
    loads = {r: start[i] for i, r in enumerate(ids)}
    idx = PrefixIndex()
    ratio, share = bound_ratio(inflight_eps), bound_ratio(eps)
    for kind, arg, session in script:
        if kind == "depart":
            assert isinstance(arg, int)
            rid = ids[arg % n]
            loads[rid] = max(0, loads[rid] - 1)
            continue
        assert isinstance(arg, tuple) and (session is None or isinstance(session, str))
        counts = [idx.recent.count(r) for r in ids]
        total, shares = sum(loads.values()), sum(counts)
        both = any(
            accepts(loads[r], total, n, ratio) and accepts(counts[i], shares, n, share)
            for i, r in enumerate(ids)
        )
        d = idx.pick(PickInput(arg, views(loads), ratio, session, share, window))
        assert accepts(loads[d.replica], total, n, ratio)
        loads[d.replica] += 1
        if both:
            assert accepts(counts[ids.index(d.replica)], shares, n, share)
            after = [c + (ids[i] == d.replica) for i, c in enumerate(counts)]
            assert after[ids.index(d.replica)] <= math.ceil(Fraction(*share) * Fraction(shares + 1, n))


@pytest.mark.parametrize(
    ("per", "n", "window"), [(32, 2, 64), (32, 8, 256), (32, 32, 256), (1, 1, 1), (0, 3, 1)]
)
def test_share_window_is_per_candidate_and_capped(per: int, n: int, window: int) -> None:
    assert share_window(per, n) == window
