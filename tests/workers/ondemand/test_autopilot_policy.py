"""The residency autopilot's decisions (pure, no I/O): waiting requests, idle timeout, headroom, budgets."""

from __future__ import annotations

import random

from workers.ondemand.autopilot.costs import H200_SECONDS, CostTable
from workers.ondemand.autopilot.moves import Move
from workers.ondemand.autopilot.plan import Plan
from workers.ondemand.autopilot.policy import AutopilotOptions, decide
from workers.ondemand.autopilot.snapshot import DeviceSnapshot, Footprint, ModelView, State

MIB, GIB = 1 << 20, 1 << 30
H200 = Footprint(awake=44_207 * MIB, asleep1=1_601 * MIB, asleep2=1_565 * MIB, host1=int(13.04 * GIB))
"""One 7B model on the H200 at 0.30 of the card (/work/shared/gpu/sleep-mode.md)."""
CARD = 143_771 * MIB
HOST = 64 * GIB


def model(name: str, state: State, **kw: object) -> ModelView:
    return ModelView(name, state, H200, **kw)  # type: ignore[arg-type]


def snap(*models: ModelView, host: int = HOST) -> DeviceSnapshot:
    return DeviceSnapshot("gpu:0", CARD, host, models)


def kinds(moves: list[Move]) -> list[tuple[str, str]]:
    return [(m.model, m.kind) for m in moves]


QUIET = AutopilotOptions(headroom=False)


def test_a_waiting_request_wakes_its_model_when_it_fits() -> None:
    moves = decide(snap(model("a", "awake", idle_s=1), model("b", "asleep1", queued=2)), CostTable(), QUIET)
    assert kinds(moves) == [("b", "wake")]
    assert moves[0].urgent and "2 waiting; ready in ~0.33 s" in moves[0].reason


def test_a_stopped_model_with_a_waiting_request_starts() -> None:
    assert kinds(decide(snap(model("a", "stopped", queued=1)), CostTable(), QUIET)) == [("a", "start")]


def test_no_room_the_lowest_demand_idle_model_sleeps_at_the_fastest_level_first() -> None:
    s = snap(
        model("hot", "awake", rates=(2.0, 3.0), idle_s=1),
        model("cold", "awake", rates=(0.1, 0.0), idle_s=1),
        model("busy", "awake", in_flight=1),
        model("w", "asleep1", queued=1, rates=(0.1,)),
    )
    moves = decide(s, CostTable(), QUIET)
    assert kinds(moves) == [("cold", "sleep2"), ("w", "wake")]
    assert all(m.urgent for m in moves)
    assert "ready in ~0.39 s" in moves[1].reason  # level-2 sleep 0.055 s + level-1 wake 0.33 s


def test_an_eviction_at_the_moment_spares_a_model_far_likelier_than_the_waking_one() -> None:
    def device(spared_rate: float) -> DeviceSnapshot:
        return snap(
            model("a", "awake", rates=(spared_rate,), idle_s=1),
            model("b", "awake", in_flight=1),
            model("c", "awake", in_flight=1),
            model("w", "asleep1", queued=1, rates=(0.1,)),
        )

    assert decide(device(0.5), CostTable(), QUIET) == []  # 0.5/s > 4 x 0.1/s: w waits for room
    assert kinds(decide(device(0.3), CostTable(), QUIET)) == [("a", "sleep2"), ("w", "wake")]
    anyone = AutopilotOptions(headroom=False, spare_above=float("inf"))
    assert kinds(decide(device(0.5), CostTable(), anyone)) == [("a", "sleep2"), ("w", "wake")]


def test_a_model_with_a_request_in_flight_is_never_moved() -> None:
    s = snap(
        model("a", "awake", in_flight=1, idle_s=999, idle_timeout_s=1),
        model("b", "awake", in_flight=3),
        model("c", "awake", in_flight=1),
        model("w", "asleep1", queued=5),
    )
    assert decide(s, CostTable()) == []


def test_higher_priority_models_are_not_evicted_for_a_lower_one() -> None:
    s = snap(*(model(n, "awake", priority=90, idle_s=50) for n in "abc"), model("w", "asleep2", queued=1))
    assert decide(s, CostTable(), QUIET) == []


def test_a_model_moving_is_left_alone() -> None:
    s = snap(
        model("a", "awake", moving=True, idle_s=999, idle_timeout_s=1),
        model("b", "asleep1", moving=True, queued=1),
    )
    assert decide(s, CostTable()) == []


def test_idle_timeout_sleeps_at_level_1_while_host_ram_fits_else_2_else_stops() -> None:
    idle = {"idle_s": 400.0, "idle_timeout_s": 300.0}
    assert kinds(decide(snap(model("a", "awake", **idle)), CostTable(), QUIET)) == [("a", "sleep1")]
    full = snap(model("a", "awake", **idle), host=10 * GIB)
    assert kinds(decide(full, CostTable(), QUIET)) == [("a", "sleep2")]
    dummy = snap(model("a", "awake", reloadable=False, **idle), host=10 * GIB)
    assert kinds(decide(dummy, CostTable(), QUIET)) == [("a", "stop")]
    assert "idle 400 s >= idle timeout 300 s" in decide(full, CostTable(), QUIET)[0].reason


def test_host_ram_counts_the_sleepers_already_at_level_1() -> None:
    sleepers = [model(f"s{i}", "asleep1") for i in range(4)]  # 4 x 13.04 GiB of 64 GiB
    moves = decide(snap(*sleepers, model("a", "awake", idle_s=400, idle_timeout_s=300)), CostTable(), QUIET)
    assert kinds(moves) == [("a", "sleep2")]


def test_a_waking_level_1_sleeper_keeps_its_host_ram_until_its_wake_ends() -> None:
    s = snap(
        model("a", "asleep1", queued=1),
        model("c", "asleep1"),
        model("b", "awake", idle_s=400, idle_timeout_s=300),
        host=2 * H200.host1 + GIB,
    )
    assert kinds(decide(s, CostTable(), QUIET)) == [("a", "wake"), ("b", "sleep2")]


def test_headroom_the_next_likely_wake_gets_its_room_ahead_in_the_background() -> None:
    s = snap(
        model("a", "awake", rates=(3.0,), idle_s=60),
        model("b", "awake", rates=(1.0,), idle_s=60),
        model("c", "awake", rates=(0.2,), idle_s=60),
        model("d", "asleep1", rates=(0.5,)),
        model("e", "asleep1", rates=(0.05,)),
    )
    moves = decide(s, CostTable())
    assert kinds(moves) == [("c", "sleep1")]
    assert not moves[0].urgent and moves[0].reason.startswith("headroom for d (predicted 0.500/s)")


def test_headroom_spares_a_model_used_moments_ago() -> None:
    s = snap(*(model(n, "awake", rates=(1.0,), idle_s=1) for n in "abc"), model("d", "asleep1", rates=(2.0,)))
    assert decide(s, CostTable(), AutopilotOptions(min_idle_s=5)) == []


def test_with_room_the_likely_sleepers_wake_ahead() -> None:
    s = snap(model("a", "asleep2", rates=(0.5,)), model("b", "asleep1", rates=(0.1,)), model("c", "asleep1"))
    moves = decide(s, CostTable())
    assert kinds(moves) == [("a", "wake"), ("b", "wake")] and not moves[0].urgent  # c: nobody asks
    assert decide(s, CostTable(), AutopilotOptions(prewake=False)) == []


def test_learned_costs_drive_the_level() -> None:
    costs = CostTable()
    for _ in range(5):
        costs.observe("a", "wake1", 4.0)  # this model's level-1 wake proved slower than its level-2 wake
    moves = decide(snap(model("a", "awake", idle_s=400, idle_timeout_s=300)), costs, QUIET)
    assert kinds(moves) == [("a", "sleep2")]


def test_random_snapshots_never_exceed_a_budget_nor_move_a_busy_model() -> None:
    rng = random.Random(44)
    states: list[State] = ["awake", "asleep1", "asleep2", "stopped"]
    for _ in range(300):
        models = []
        for i in range(8):
            state = rng.choice(states)
            busy = state == "awake" and rng.random() < 0.2  # requests run only on an awake model
            models.append(model(
                f"m{i}", state, in_flight=int(busy), queued=int(rng.random() < 0.2),
                rates=tuple(rng.random() * 2 for _ in range(3)), idle_s=rng.random() * 600,
                priority=rng.choice([10, 50, 90]), moving=rng.random() < 0.1, reloadable=rng.random() < 0.8,
            ))  # fmt: skip
        s = snap(*models)
        start = Plan(s)
        if not start.within_budgets():
            continue
        moves = decide(s, CostTable())
        plan = Plan(s)
        for mv in moves:
            m = plan.view(mv.model)
            assert m.in_flight == 0 and not m.moving, mv
            plan.apply(mv)
            assert plan.within_budgets(), mv
        assert len({mv.model for mv in moves}) == len(moves)


def test_the_seed_is_the_h200s_measured_middle() -> None:
    assert H200_SECONDS["sleep1"] == 9.9 and H200_SECONDS["wake1"] == 0.33 and H200_SECONDS["start"] == 87.7


def test_a_sleeper_idle_past_its_idle_timeout_is_not_woken_ahead() -> None:
    # the idle timeout is an input of the one policy: a model it put to sleep stays asleep until asked,
    # even with room and some demand left in its rate history (no sleep-wake flapping)
    s = snap(model("a", "asleep1", rates=(0.5,), idle_s=400, idle_timeout_s=300))
    assert decide(s, CostTable()) == []
    s2 = snap(model("a", "asleep2", rates=(0.5,), idle_s=400, idle_timeout_s=300))
    assert decide(s2, CostTable()) == []


def test_a_wake_on_a_request_path_makes_room_for_its_own_model_only() -> None:
    """The supervisor plans one waiting model's wake at a time: the sleeps that make the room of the other
    waiting models are theirs to carry out (each one on that request's own path costs it a drain)."""
    from workers.ondemand.autopilot.policy import decide_wake

    s = snap(
        model("x", "awake", idle_s=30), model("y", "awake", idle_s=20), model("z", "awake", idle_s=10),
        model("a", "asleep2", queued=1), model("b", "asleep1", queued=3),
    )  # fmt: skip
    everyone = decide(s, CostTable(), QUIET)
    assert {m.model for m in everyone if m.kind == "wake"} == {"a", "b"}  # both waiting models served
    moves = decide_wake(s, "a", CostTable(), QUIET)
    assert kinds(moves) == [("x", "sleep2"), ("a", "wake")]  # one room, for a alone
    assert decide_wake(s, "nobody", CostTable(), QUIET) == []
