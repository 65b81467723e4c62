"""The device as the moves decided so far leave it (pure): each model's state, the GPU and host-RAM bytes
used, and whether one more move keeps both within budget."""

from __future__ import annotations

from dataclasses import dataclass, field

from workers.ondemand.autopilot.moves import Move
from workers.ondemand.autopilot.snapshot import DeviceSnapshot, ModelView, State


@dataclass(slots=True)
class Plan:
    """The snapshot with the moves of this decision applied, in order."""

    snap: DeviceSnapshot
    states: dict[str, State] = field(default_factory=dict)
    moves: list[Move] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.states = {m.name: m.state for m in self.snap.models}

    def view(self, name: str) -> ModelView:
        return next(m for m in self.snap.models if m.name == name)

    def gpu_used(self) -> int:
        return sum(m.gpu(self.states[m.name]) for m in self.snap.models)

    def host_used(self) -> int:
        """Host RAM of the level-1 sleepers: a model leaving level 1 in this plan still counts (its copy is
        given back only when its wake ends, after other moves of the plan may have begun)."""
        return sum(max(m.host(self.states[m.name]), m.host(m.state)) for m in self.snap.models)

    def gpu_free(self) -> int:
        return self.snap.gpu_budget - self.gpu_used()

    def need(self, m: ModelView) -> int:
        """GPU bytes ``m`` would add by waking from its planned state."""
        return m.footprint.awake - m.gpu(self.states[m.name])

    def host_fits(self, m: ModelView) -> bool:
        """True when ``m``'s weights fit in host RAM beside the planned level-1 sleepers'."""
        others = self.host_used() - max(m.host(self.states[m.name]), m.host(m.state))
        return others + m.footprint.host1 <= self.snap.host_budget

    def moved(self, name: str) -> bool:
        return any(mv.model == name for mv in self.moves)

    def apply(self, move: Move) -> None:
        """Take ``move`` (the caller checked it keeps the budgets)."""
        self.moves.append(move)
        self.states[move.model] = move.target

    def within_budgets(self) -> bool:
        return self.gpu_used() <= self.snap.gpu_budget and self.host_used() <= self.snap.host_budget

    def copy(self) -> Plan:
        out = Plan(self.snap)
        out.states, out.moves = dict(self.states), list(self.moves)
        return out
