"""The short form of ``make residency``: a 2-minute trace replayed on the simulated H200 under the three
policies (well under a second of CPU): every request is answered, no move leaves a budget exceeded, the
trace is the same for the same seed, and the autopilot's first tokens are no worse than today's."""

from __future__ import annotations

from bench.residency.run import Setup, simulate, table
from bench.residency.trace import TraceParams, generate


def test_the_trace_is_seeded_and_holds_the_returner() -> None:
    p = TraceParams(duration_s=120, hour_s=60)
    trace = generate(p)
    assert trace == generate(p) and trace != generate(TraceParams(duration_s=120, hour_s=60, seed=1))
    back = [r.t for r in trace if r.model == "m7"]
    assert back[0] == p.return_at_s and back[-1] >= p.return_at_s + p.hour_s
    assert p.compression == 60.0


def test_short_replay_three_policies() -> None:
    rows, devs = simulate(Setup(TraceParams(duration_s=120, hour_s=60)))
    print(table(rows))
    by = {r.policy: r for r in rows}
    assert set(by) == {"autopilot", "today", "all awake at 1/N"}
    total = by["all awake at 1/N"].requests
    assert total > 50 and all(r.requests == total for r in rows)  # nobody left waiting
    assert all(r.over_budget == 0 for r in rows)
    assert by["autopilot"].ttft_le_1s >= by["today"].ttft_le_1s
    assert by["all awake at 1/N"].wakes == 0 and by["autopilot"].decisions > 0
    for dev in devs.values():
        gpu, host = dev.used()
        assert gpu <= dev.gpu_budget and host <= dev.host_budget
