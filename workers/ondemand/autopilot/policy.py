"""The autopilot's decision for one device (pure): the moves that serve the waiting requests, put the
idle models to sleep and keep headroom, in this order:

1. **Waiting requests.** A model that is not awake with requests waiting wakes (or starts). When it does not
   fit, idle models of lower or equal priority go to sleep first, lowest predicted demand first (least
   recently used among equals): the at-the-moment eviction, at the level whose sleep is fastest (the
   request waits for it). A model that cannot fit is left asleep.
2. **Idle timeout.** An awake model idle for its ``idle_timeout_s`` sleeps, at the level whose wake is
   fastest (level 1 while its weights fit in the host budget, else level 2, else it stops).
3. **Headroom.** The next likely wake (the highest predicted demand among the models not awake) must need
   no sleep first: when it would, the idle awake model of lowest predicted demand (idle for at least
   ``min_idle_s``) sleeps now, in the background, at the level whose wake is fastest. When there is room
   for it and for the one after it, it is woken ahead (``prewake``). A model idle past its idle timeout is
   never a likely wake (:func:`is_likely`).

A model with a request in flight, or a move in progress, is never moved; no move leaves the GPU or the
host-RAM budget exceeded."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from workers.ondemand.autopilot.costs import CostedMove, CostTable, wake_move
from workers.ondemand.autopilot.forecast import predicted
from workers.ondemand.autopilot.moves import Move, MoveKind, wake_kind
from workers.ondemand.autopilot.plan import Plan
from workers.ondemand.autopilot.snapshot import DeviceSnapshot, ModelView

SLEEP_COST: Mapping[MoveKind, CostedMove] = {
    "sleep1": "sleep1", "sleep2": "sleep2", "stop": "stop", "wake": "wake1", "start": "start"
}  # fmt: skip
"""The costed move of a sleep (a wake's depends on the level it wakes from: :func:`wake_move`)."""


@dataclass(frozen=True, slots=True)
class AutopilotOptions:
    alpha: float = 0.5
    """Weight of the newest rate window in the predicted demand."""
    min_idle_s: float = 15.0
    """An awake model idle for less than this is not put to sleep for headroom."""
    min_rate: float = 1e-9
    """A model not awake is a likely wake only with a predicted demand above this (requests/s)."""
    headroom: bool = True
    prewake: bool = True
    spare_above: float = 4.0
    """An at-the-moment eviction spares the models whose predicted demand is above this many times the
    waking model's (its request waits for the headroom instead)."""


def decide(
    snap: DeviceSnapshot, costs: CostTable, options: AutopilotOptions = AutopilotOptions()
) -> list[Move]:
    """The moves for ``snap``, in the order to carry them out (a wake after the sleeps that make its room)."""
    plan = Plan(snap)
    demand = {m.name: predicted(m.rates, m.queued, options.alpha) for m in snap.models}
    for m in sorted(waiting(plan), key=lambda m: (-m.priority, -m.queued, m.name)):
        serve(plan, m, demand, costs, options)
    for m in snap.models:
        if free_to_move(plan, m) and plan.states[m.name] == "awake" and m.idle_s >= m.idle_timeout_s:
            level = rest_level(plan, m, costs, urgent=False)
            plan.apply(Move(m.name, level, f"idle {m.idle_s:.0f} s >= idle timeout {m.idle_timeout_s:.0f} s"))
    if options.headroom:
        keep_headroom(plan, demand, costs, options)
    return plan.moves


def decide_wake(
    snap: DeviceSnapshot, name: str, costs: CostTable, options: AutopilotOptions = AutopilotOptions()
) -> list[Move]:
    """The moves a waiting request's wake of ``name`` carries out on its own path: the sleeps that make its
    room, then its wake ([] when it is not waiting or cannot fit; the other waiting models' rooms are
    theirs)."""
    plan = Plan(snap)
    demand = {m.name: predicted(m.rates, m.queued, options.alpha) for m in snap.models}
    for m in waiting(plan):
        if m.name == name:
            serve(plan, m, demand, costs, options)
    return plan.moves


def free_to_move(plan: Plan, m: ModelView) -> bool:
    """Nothing in flight or queued, no move in progress, none decided yet."""
    return not (m.busy or m.moving or plan.moved(m.name))


def waiting(plan: Plan) -> list[ModelView]:
    return [m for m in plan.snap.models if m.queued and not m.moving and plan.states[m.name] != "awake"]


def rest_level(plan: Plan, m: ModelView, costs: CostTable, urgent: bool) -> MoveKind:
    """How ``m`` goes to sleep now: among level 1 (while its weights fit in host RAM) and level 2 (when
    they can be reloaded), the fastest sleep when a request waits for it, else the fastest wake; else stop."""
    options: list[tuple[MoveKind, CostedMove, CostedMove]] = []
    if plan.host_fits(m):
        options.append(("sleep1", "sleep1", "wake1"))
    if m.reloadable:
        options.append(("sleep2", "sleep2", "wake2"))
    if not options:
        return "stop"
    return min(options, key=lambda o: costs.cost(m.name, o[1] if urgent else o[2]))[0]


def victims(
    plan: Plan,
    m: ModelView,
    demand: Mapping[str, float],
    costs: CostTable,
    urgent: bool,
    min_idle_s: float,
    ceiling: float = float("inf"),
) -> Plan | None:
    """``plan`` with sleeps that make room for ``m`` to wake (idle models of priority <= its own and
    predicted demand <= ``ceiling``, lowest first); None when they cannot."""
    out = plan.copy()
    candidates = sorted(
        (
            v for v in plan.snap.models
            if v.name != m.name and free_to_move(plan, v) and plan.states[v.name] == "awake"
            and v.priority <= m.priority and v.idle_s >= min_idle_s and demand[v.name] <= ceiling
        ),
        key=lambda v: (demand[v.name], -v.idle_s, v.name),
    )  # fmt: skip
    for v in candidates:
        if out.need(m) <= out.gpu_free():
            break
        level = rest_level(out, v, costs, urgent)
        cost = costs.cost(v.name, SLEEP_COST[level])
        why = f"room for {m.name}: lowest predicted demand {demand[v.name]:.3f}/s, {level} in {cost:.2f} s"
        out.apply(Move(v.name, level, why, urgent))
    return out if out.need(m) <= out.gpu_free() else None


def serve(
    plan: Plan, m: ModelView, demand: Mapping[str, float], costs: CostTable, options: AutopilotOptions
) -> None:
    """Wake ``m`` for its waiting requests, making room at the moment if it must (sparing the models far
    likelier than ``m``: ``spare_above``)."""
    base = predicted(m.rates, 0, options.alpha)
    ceiling = options.spare_above * base if options.spare_above != float("inf") else options.spare_above
    room = victims(plan, m, demand, costs, urgent=True, min_idle_s=0.0, ceiling=ceiling)
    if room is None:
        return
    made = room.moves[len(plan.moves) :]
    took = sum(costs.cost(v.model, SLEEP_COST[v.kind]) for v in made)
    took += costs.cost(m.name, wake_move(plan.states[m.name]))
    for mv in made:
        plan.apply(mv)
    why = f"{m.queued} waiting; ready in ~{took:.2f} s"
    plan.apply(Move(m.name, wake_kind(plan.states[m.name]), why, True))


def is_likely(m: ModelView, demand: Mapping[str, float], options: AutopilotOptions) -> bool:
    """A likely wake: predicted demand above ``min_rate`` and idle for less than its idle timeout (a model
    the idle timeout put to sleep stays asleep until asked, whatever its rate history says)."""
    return demand[m.name] > options.min_rate and m.idle_s < m.idle_timeout_s


def awake_set(plan: Plan, demand: Mapping[str, float], options: AutopilotOptions) -> tuple[set[str], str]:
    """The models to keep awake: those that cannot move, then the likeliest, while they fit on the GPU
    with room left for the likeliest sleeper outside the set (the headroom; none when nobody is likely);
    and that headroom model's name ("" when none)."""
    models = plan.snap.models
    ranked = sorted(models, key=lambda m: (-demand[m.name], -m.priority, m.name))
    chosen = {m.name for m in models if plan.states[m.name] == "awake" and not free_to_move(plan, m)}
    base = plan.snap.gpu_budget - sum(m.footprint.asleep1 for m in models)
    extra = {m.name: m.footprint.awake - m.footprint.asleep1 for m in models}
    likely = [m.name for m in ranked if plan.states[m.name] != "awake" and is_likely(m, demand, options)]

    def headroom(exclude: set[str]) -> str:
        return next((n for n in likely if n not in exclude), "")

    used = sum(extra[n] for n in chosen)
    for m in ranked:
        if m.name in chosen:
            continue
        room = headroom(chosen | {m.name})
        if used + extra[m.name] + (extra[room] if room else 0) > base:
            break
        chosen.add(m.name)
        used += extra[m.name]
    return chosen, headroom(chosen)


def keep_headroom(
    plan: Plan, demand: Mapping[str, float], costs: CostTable, options: AutopilotOptions
) -> None:
    """Toward the awake set (:func:`awake_set`): the awake models outside it sleep in the background,
    lowest predicted demand first, once idle ``min_idle_s``; the sleepers inside it wake ahead while the
    headroom stays free."""
    keep, room_for = awake_set(plan, demand, options)
    head = f"headroom for {room_for} (predicted {demand[room_for]:.3f}/s)" if room_for else "headroom"
    spare = sorted(
        (m for m in plan.snap.models if plan.states[m.name] == "awake" and m.name not in keep
         and free_to_move(plan, m) and m.idle_s >= options.min_idle_s),
        key=lambda m: (demand[m.name], -m.idle_s, m.name),
    )  # fmt: skip
    for m in spare:
        level = rest_level(plan, m, costs, urgent=False)
        cost = costs.cost(m.name, SLEEP_COST[level])
        plan.apply(Move(m.name, level, f"{head}: lowest predicted demand {demand[m.name]:.3f}/s, "
                        f"idle {m.idle_s:.0f} s, {level} in {cost:.2f} s"))  # fmt: skip
    reserve = plan.view(room_for).footprint.awake if room_for else 0
    for m in sorted(plan.snap.models, key=lambda m: (-demand[m.name], m.name)):
        if m.name not in keep or plan.states[m.name] == "awake" or m.moving or plan.moved(m.name):
            continue
        if not is_likely(m, demand, options):
            continue
        if options.prewake and plan.need(m) + reserve <= plan.gpu_free():
            why = f"ahead: predicted {demand[m.name]:.3f}/s, {head} kept"
            plan.apply(Move(m.name, wake_kind(plan.states[m.name]), why))
    promote(plan, demand, reserve, options)


def promote(plan: Plan, demand: Mapping[str, float], reserve: int, options: AutopilotOptions) -> None:
    """The likeliest level-2 sleeper wakes ahead when host RAM has room for its weights and the GPU for it
    beside the headroom: it goes back to sleep at level 1 once idle (a 0.3 s wake next time, not 2.5 s)."""
    for m in sorted(plan.snap.models, key=lambda m: (-demand[m.name], m.name)):
        if plan.states[m.name] != "asleep2" or m.moving or plan.moved(m.name) or not plan.host_fits(m):
            continue
        if options.prewake and is_likely(m, demand, options) and plan.need(m) + reserve <= plan.gpu_free():
            why = f"to level 1 by way of a wake: predicted {demand[m.name]:.3f}/s, host RAM has room"
            plan.apply(Move(m.name, "wake", why))
        return
