"""The queue's order as plain code (no I/O): priority, then token-weighted fair share, then arrival."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from gateway.admission.order import FairClock, FairQueue, queue_member, start_of, ticket_of


def drain(q: FairQueue, n: int) -> list[str]:
    out = []
    for _ in range(n):
        t = q.pop()
        assert t is not None
        out.append(t)
    return out


def test_member_round_trips_ticket_and_start() -> None:
    m = queue_member(3, 1234, 7, "gw-1:abc")
    assert ticket_of(m) == "gw-1:abc" and start_of(m) == 1234


@given(
    st.tuples(st.integers(0, 9999), st.integers(0, 10**14), st.integers(0, 10**14)),
    st.tuples(st.integers(0, 9999), st.integers(0, 10**14), st.integers(0, 10**14)),
)
def test_member_byte_order_is_grant_order(a: tuple[int, int, int], b: tuple[int, int, int]) -> None:
    ma, mb = queue_member(*a, "x"), queue_member(*b, "x")
    key_a, key_b = (-a[0], a[1], a[2]), (-b[0], b[1], b[2])
    assert (ma.encode() < mb.encode()) == (key_a < key_b)


def test_higher_priority_first_then_arrival() -> None:
    q = FairQueue()
    q.push("low-1", "t", 0, 10)
    q.push("high-1", "u", 5, 10)
    q.push("low-2", "v", 0, 10)
    q.push("high-2", "w", 5, 10)
    assert drain(q, 4) == ["high-1", "high-2", "low-1", "low-2"]


def test_one_tenant_keeps_arrival_order() -> None:
    q = FairQueue()
    for i in range(5):
        q.push(f"a{i}", "a", 0, 10)
    assert drain(q, 5) == [f"a{i}" for i in range(5)]


def test_flooding_tenant_does_not_starve_a_light_one() -> None:
    q = FairQueue()
    for i in range(100):
        q.push(f"A{i}", "A", 0, 50)
    for i in range(10):
        q.push(f"B{i}", "B", 0, 50)
    first = drain(q, 20)
    shares = Counter(t[0] for t in first)
    assert shares["B"] == 10 and shares["A"] == 10


def test_share_is_weighted_by_token_cost() -> None:
    q = FairQueue()
    for i in range(60):
        q.push(f"A{i}", "A", 0, 100)  # large requests
        q.push(f"B{i}", "B", 0, 50)  # half as large
    served = Counter(t[0] for t in drain(q, 30))
    assert served["B"] == 2 * served["A"]


def test_late_tenant_starts_at_virtual_time_not_at_zero() -> None:
    clock = FairClock()
    for _ in range(10):
        clock.granted(clock.tag("A", 100))
    assert clock.tag("B", 100) == clock.virtual  # no credit for having been idle


@given(st.lists(st.tuples(st.sampled_from("ABC"), st.integers(1, 500)), max_size=80))
def test_sfq_bound_between_backlogged_tenants(reqs: list[tuple[str, int]]) -> None:
    """While two tenants both still wait, the token costs they were served differ by at most the sum of
    their largest requests (start-time fair queueing's bound), whatever the mix of loads."""
    q = FairQueue()
    costs = {}
    for i, (tenant, cost) in enumerate(reqs):
        q.push(f"{tenant}{i}", tenant, 0, cost)
        costs[f"{tenant}{i}"] = cost
    largest = {t: max(c for tt, c in reqs if tt == t) for t, _ in reqs}
    waiting = Counter(t for t, _ in reqs)
    served: Counter[str] = Counter()
    while (ticket := q.pop()) is not None:
        served[ticket[0]] += costs[ticket]
        waiting[ticket[0]] -= 1
        still = [t for t in waiting if waiting[t] > 0]
        for x in still:
            for y in still:
                assert served[x] - served[y] <= largest[x] + largest[y]
