"""The residency autopilot inside the supervisor (issue 44): what the activator knows of one device turned
into a :class:`DeviceSnapshot`, the policy's moves (:func:`workers.ondemand.autopilot.policy.decide`), each
carried out logged in one line and counted, and the learned cost of each move measured as it ends.

The pieces here are pure or read only the activator's fields; the activator carries the moves out through
the owner's sleep and wake verbs (:mod:`workers.ondemand.activator`). Demand is what the activator sees each
tick: a model's rate in a window is the requests that arrived in it per second, whatever its state
(:class:`Busyness`, from the count of requests in flight or waiting each tick), as in the simulation;
requests waiting for a wake count apart too (``queued``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from llmgw_contract.fleet import Model
from llmgw_contract.registry import ROUTABLE, ReplicaState
from llmgw_contract.replica_metrics import SupervisorMetrics
from workers.life.replica import Replica
from workers.ondemand.autopilot.costs import CostedMove, CostTable
from workers.ondemand.autopilot.moves import Move
from workers.ondemand.autopilot.policy import AutopilotOptions, decide, decide_wake
from workers.ondemand.autopilot.snapshot import DeviceSnapshot, Footprint, ModelView, State
from workers.ondemand.sleepers.level import SleepLevel

log = logging.getLogger("llmgw.ondemand")
WINDOW_S, WINDOWS = 10.0, 6
"""The demand history the autopilot sees: 6 windows of 10 s (as in ``bench/residency``)."""
LEVEL: dict[str, SleepLevel] = {"sleep1": 1, "sleep2": 2, "stop": 0}
"""The sleep level of each sleep move (0: the process stops)."""
MOVING = (ReplicaState.WAKING, ReplicaState.DRAINING, ReplicaState.STARTING)
SUPERVISOR_OPTIONS = AutopilotOptions()
"""The policy's options here: the simulation's (demand is request arrivals in both): a waiting request's
wake takes its room from idle models of its priority or lower, lowest predicted demand first, sparing those
more than ``spare_above`` times likelier than it (that request waits for the headroom instead)."""


@dataclass(slots=True)
class Busyness:
    """Per model, the requests that arrived in each recent window of ``window_s``, whatever its state: each
    reading's count of requests in flight or waiting, less the previous reading's, when it grew."""

    window_s: float = WINDOW_S
    windows: int = WINDOWS
    arrived: dict[str, dict[int, int]] = field(default_factory=dict)
    present: dict[str, int] = field(default_factory=dict)

    def record(self, model: str, now: float, present: int) -> None:
        """One tick's reading: ``present`` requests in flight or waiting for ``model``."""
        new = present - self.present.get(model, 0)
        self.present[model] = present
        if new <= 0:
            return
        w = int(now // self.window_s)
        counts = self.arrived.setdefault(model, {})
        counts[w] = counts.get(w, 0) + new
        for old in [k for k in counts if k <= w - self.windows]:
            del counts[old]

    def rates(self, model: str, now: float) -> tuple[float, ...]:
        """Requests/s that arrived in each of the last ``windows`` windows, oldest first (the newest is the
        window going on)."""
        w = int(now // self.window_s)
        counts = self.arrived.get(model, {})
        return tuple(counts.get(i, 0) / self.window_s for i in range(w - self.windows + 1, w + 1))


def cause(move: Move) -> str:
    """The move's reason as a metric label: waiting (a wake a request waits for), room (a sleep that makes
    its room), idle (the idle timeout), ahead (a wake before the request), promote (a level-2 sleeper woken
    to sleep at level 1 next), headroom (a sleep that keeps room for the next likely wake)."""
    if move.urgent:
        return "waiting" if move.kind in ("wake", "start") else "room"
    for prefix, label in (("idle", "idle"), ("ahead", "ahead"), ("to level 1", "promote")):
        if move.reason.startswith(prefix):
            return label
    return "headroom"


def sleep_level(move: Move, model: Model, sleeps_in_place: bool) -> SleepLevel:
    """The level a sleep move is carried out at: 0 for a replica without sleep mode (the process stops, as
    on a CPU); a model's explicit ``sleep.level`` is kept; else the policy's."""
    if not sleeps_in_place:
        return 0
    level = LEVEL[move.kind]
    return model.sleep.level if level and model.sleep.level != "auto" else level


def waking_move(level: SleepLevel, alive: bool) -> CostedMove:
    """The costed move a wake from ``level`` is (a replica whose process was stopped starts)."""
    if not alive or level == 0:
        return "start"
    return "wake1" if level == 1 else "wake2"


def state_of(r: Replica, level: SleepLevel) -> State | None:
    """The replica's state as the autopilot sees it (a move in progress: the state it holds most in);
    None when it has none (FAILED)."""
    if r.state in ROUTABLE or r.state in MOVING:
        return "awake"
    if r.state is ReplicaState.ASLEEP:
        if not r.process.alive:
            return "stopped"
        return "asleep2" if level == 2 else "asleep1"
    return None


@dataclass(frozen=True, slots=True)
class Seen:
    """One on-demand model of a device as the activator read it this tick."""

    replica: Replica
    model: Model
    level: SleepLevel
    awake_bytes: int
    asleep_bytes: int
    weights_bytes: int
    sleeps_in_place: bool
    busy: bool
    asked: bool
    idle_s: float
    moving: bool
    planned: State | None = None
    """The state a waiting request's wake planned for it (its own wake, or a sleep for its room), booked
    before the replica moves."""


def view(s: Seen) -> ModelView | None:
    """The autopilot's view of ``s`` (None: a replica in no state it can move, FAILED)."""
    state = s.planned or state_of(s.replica, s.level)
    if state is None:
        return None
    # without sleep mode there is no level 1 nor 2: its "host RAM" never fits, it cannot reload: it stops
    host1 = s.weights_bytes if s.sleeps_in_place else max(1, s.awake_bytes)
    asleep = s.asleep_bytes if s.sleeps_in_place else 0
    waiting = (s.asked or s.busy) and state != "awake"  # busy asleep: its requests wait for a wake
    return ModelView(
        s.model.name, state, Footprint(s.awake_bytes, asleep, asleep, host1),
        in_flight=int(s.busy and not waiting), queued=int(waiting), idle_s=s.idle_s,
        idle_timeout_s=s.model.idle_timeout_s, priority=s.model.priority,
        moving=s.moving or s.replica.state in MOVING,
        reloadable=s.sleeps_in_place and s.model.engine.load_format != "dummy",
    )  # fmt: skip


class Pilot:
    """The policy's state in the supervisor: learned costs, demand history, options; logs and counts
    each move carried out."""

    def __init__(self, metrics: SupervisorMetrics, options: AutopilotOptions | None = None) -> None:
        self.metrics, self.options = metrics, options or SUPERVISOR_OPTIONS
        self.costs = CostTable()
        self.busyness = Busyness()

    def snapshot(
        self, device: str, gpu_budget: int | None, host_budget: int, seen: Sequence[Seen], now: float
    ) -> DeviceSnapshot:
        """The device as the policy sees it (an unknown GPU budget: room for every model awake)."""
        views = []
        for s in seen:
            v = view(s)
            if v is not None:
                views.append(replace(v, rates=self.busyness.rates(s.model.name, now)))
        budget = gpu_budget if gpu_budget is not None else sum(v.footprint.awake for v in views)
        return DeviceSnapshot(device, budget, host_budget, tuple(views))

    def decide(self, snap: DeviceSnapshot, headroom: bool = True) -> list[Move]:
        """The policy's moves for ``snap`` (``headroom`` False: waiting requests and idle timeouts only, for
        a device whose budget is not known yet)."""
        return decide(snap, self.costs, self.options if headroom else replace(self.options, headroom=False))

    def decide_wake(self, snap: DeviceSnapshot, name: str) -> list[Move]:
        """The moves of a waiting request's wake of ``name``: its room's sleeps, then its wake."""
        return decide_wake(snap, name, self.costs, self.options)

    def carried(self, device: str, move: Move) -> None:
        """One move begins: its line in the log, its count."""
        log.info("autopilot %s %s", device, move.line())
        self.metrics.autopilot_moves.labels(move.model, move.kind, cause(move)).inc()

    def measured(self, model: str, move: CostedMove, seconds: float) -> None:
        """A move of ``model`` took ``seconds``: folded into its learned cost."""
        self.costs.observe(model, move, seconds)
