"""The autopilot in the supervisor, its pure parts: the snapshot from what the activator read, demand
history, the metric label of each move, the level a sleep is carried out at, costs learned from moves."""

from __future__ import annotations

import itertools
from pathlib import Path

from llmgw_contract.fleet import parse_fleet
from llmgw_contract.registry import ReplicaState
from llmgw_contract.replica_metrics import SupervisorMetrics
from testing.fake_process import FakeProcess
from workers.life.replica import Replica
from workers.ondemand.autopilot.costs import H200_SECONDS
from workers.ondemand.autopilot.moves import Move
from workers.ondemand.pilot import Busyness, Pilot, Seen, cause, sleep_level, view, waking_move
from workers.replica.launch import Launch, ReplicaSpec

GIB = 1 << 30
FLEET = parse_fleet(
    "models:\n"
    " - {name: a, source: {path: /a}, activation: on_demand, idle_timeout_s: 60, priority: 7}\n"
    " - {name: b, source: {path: /b}, activation: on_demand, sleep: {level: 2}}\n"
)
A, B = FLEET.models


def replica(tmp: Path, state: ReplicaState, alive: bool) -> Replica:
    r = Replica(ReplicaSpec(A, 0, 8100, (0,)), Launch(["fake"]), tmp)
    r.process = FakeProcess(r.process.launch, r.process.log_file, itertools.count(100))
    r.process.running, r.state = alive, state
    return r


def seen(r: Replica, **kw: object) -> Seen:
    base: dict[str, object] = dict(
        replica=r, model=A, level=0, awake_bytes=4 * GIB, asleep_bytes=GIB, weights_bytes=3 * GIB,
        sleeps_in_place=False, busy=False, asked=False, idle_s=5.0, moving=False,
    )  # fmt: skip
    return Seen(**{**base, **kw})  # type: ignore[arg-type]


def test_a_stopped_cpu_replica_asked_for_is_a_waiting_model_that_can_only_stop(tmp_path: Path) -> None:
    v = view(seen(replica(tmp_path, ReplicaState.ASLEEP, alive=False), busy=True, asked=True))
    assert v is not None and v.state == "stopped" and v.queued == 1 and v.in_flight == 0
    assert v.footprint.gpu("asleep1") == 0 and not v.reloadable  # no sleep mode: it stops
    assert (v.idle_timeout_s, v.priority) == (60, 7)
    # requests queued for it before any gateway asked: waiting too (a wake the request path carries out)
    early = view(seen(replica(tmp_path, ReplicaState.ASLEEP, alive=False), busy=True))
    assert early is not None and early.queued == 1 and early.in_flight == 0


def test_an_awake_busy_replica_has_a_request_in_flight_and_one_moving_is_left_alone(tmp_path: Path) -> None:
    v = view(seen(replica(tmp_path, ReplicaState.READY, alive=True), busy=True))
    assert v is not None and v.state == "awake" and v.in_flight == 1 and v.busy
    waking = view(seen(replica(tmp_path, ReplicaState.WAKING, alive=True)))
    assert waking is not None and waking.moving and waking.state == "awake"
    assert view(seen(replica(tmp_path, ReplicaState.FAILED, alive=False))) is None


def test_a_sleep_mode_replica_asleep_in_place_is_at_its_level(tmp_path: Path) -> None:
    r = replica(tmp_path, ReplicaState.ASLEEP, alive=True)
    v1, v2 = view(seen(r, level=1, sleeps_in_place=True)), view(seen(r, level=2, sleeps_in_place=True))
    assert v1 is not None and v1.state == "asleep1" and v1.footprint.host1 == 3 * GIB and v1.reloadable
    assert v2 is not None and v2.state == "asleep2" and v2.footprint.gpu("asleep2") == GIB


def test_demand_is_the_arrivals_per_second_of_each_window_oldest_first_whatever_the_state() -> None:
    """Requests that arrive count whatever the model's state: a model asked while asleep (its requests wait
    for its wake) is as likely as one asked while awake (the simulation's request rates)."""
    b = Busyness(window_s=10.0, windows=3)
    b.record("a", 100.0, 1)  # asleep, one request waits
    b.record("a", 101.0, 3)  # two more arrive while it wakes
    b.record("a", 102.0, 3)  # woken: the same three run
    b.record("a", 104.0, 1)  # two finished
    b.record("a", 105.0, 2)  # one more
    b.record("a", 107.0, 0)
    assert b.rates("a", 107.0) == (0.0, 0.0, 0.4)
    assert b.rates("a", 125.0) == (0.4, 0.0, 0.0)  # two windows later, then none
    assert b.rates("never", 125.0) == (0.0, 0.0, 0.0)


def test_each_move_has_a_short_reason_label() -> None:
    assert cause(Move("a", "wake", "2 waiting", urgent=True)) == "waiting"
    assert cause(Move("a", "sleep2", "room for b", urgent=True)) == "room"
    assert cause(Move("a", "sleep1", "idle 400 s >= idle timeout 300 s")) == "idle"
    assert cause(Move("a", "wake", "ahead: predicted 0.5/s")) == "ahead"
    assert cause(Move("a", "wake", "to level 1 by way of a wake")) == "promote"
    assert cause(Move("a", "sleep1", "headroom for b (predicted 0.1/s)")) == "headroom"


def test_a_sleep_is_carried_out_at_the_policys_level_unless_the_model_sets_one() -> None:
    assert sleep_level(Move("a", "sleep1", ""), A, sleeps_in_place=True) == 1
    assert sleep_level(Move("a", "sleep2", ""), A, sleeps_in_place=True) == 2
    assert sleep_level(Move("b", "sleep1", ""), B, sleeps_in_place=True) == 2  # sleep.level: 2 is kept
    assert sleep_level(Move("a", "sleep1", ""), A, sleeps_in_place=False) == 0  # no sleep mode: stop
    assert sleep_level(Move("b", "stop", ""), B, sleeps_in_place=True) == 0


def test_costs_are_learned_from_each_measured_move_and_each_move_is_counted(tmp_path: Path) -> None:
    metrics = SupervisorMetrics()
    pilot = Pilot(metrics)
    assert (waking_move(1, True), waking_move(2, True), waking_move(1, False)) == ("wake1", "wake2", "start")
    assert pilot.costs.cost("a", "start") == H200_SECONDS["start"]
    pilot.measured("a", waking_move(0, False), 3.0)
    assert pilot.costs.cost("a", "start") == 3.0 and pilot.costs.cost("b", "start") == H200_SECONDS["start"]
    asked = seen(replica(tmp_path, ReplicaState.ASLEEP, alive=False), asked=True)
    snap = pilot.snapshot("cpu:0", 5 * GIB, 0, [asked], 0.0)
    moves = pilot.decide(snap)
    assert [(m.model, m.kind) for m in moves] == [("a", "start")] and "ready in ~3.00 s" in moves[0].reason
    pilot.carried("cpu:0", moves[0])
    assert metrics.autopilot_moves.labels("a", "start", "waiting")._value.get() == 1


def test_a_waiting_request_gets_room_from_an_idle_model_unless_it_is_far_likelier(
    tmp_path: Path,
) -> None:
    # the simulation's options: the eviction at the moment spares an idle model whose arrivals are more than
    # spare_above (4) times the waiting model's (that request waits for the headroom instead)
    def moves(arrivals_of_a: int) -> list[tuple[str, str, bool]]:
        pilot = Pilot(SupervisorMetrics())
        pilot.busyness.record("a", 1.0, arrivals_of_a)
        pilot.busyness.record("a", 2.0, 0)
        pilot.busyness.record("b", 3.0, 1)
        waiting = seen(replica(tmp_path, ReplicaState.ASLEEP, alive=False), model=B, asked=True)
        idle = seen(replica(tmp_path, ReplicaState.READY, alive=True), idle_s=1.0)
        snap = pilot.snapshot("cpu:0", 5 * GIB, 0, [waiting, idle], 5.0)
        return [(m.model, m.kind, m.urgent) for m in pilot.decide(snap, headroom=False)]

    assert moves(2) == [("a", "stop", True), ("b", "start", True)]
    assert moves(10) == []
