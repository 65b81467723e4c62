"""What the autopilot sees of one device at one moment (pure values): each on-demand model's state, the
memory it holds in each state, its load and its recent request rates, and the device's budgets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

State = Literal["awake", "asleep1", "asleep2", "stopped"]
"""awake; asleep at vLLM's level 1 (weights in host RAM) or level 2 (weights dropped); stopped (no
process)."""


@dataclass(frozen=True, slots=True)
class Footprint:
    """Bytes one model holds: on the GPU in each state (stopped holds none), and in host RAM at level 1."""

    awake: int
    asleep1: int
    asleep2: int
    host1: int
    """Host RAM its weights take while it sleeps at level 1."""

    def gpu(self, state: State) -> int:
        return {"awake": self.awake, "asleep1": self.asleep1, "asleep2": self.asleep2, "stopped": 0}[state]

    def host(self, state: State) -> int:
        return self.host1 if state == "asleep1" else 0


@dataclass(frozen=True, slots=True)
class ModelView:
    """One on-demand model of the device as the autopilot sees it now."""

    name: str
    state: State
    footprint: Footprint
    in_flight: int = 0
    """Requests running on it: it is never moved while any are."""
    queued: int = 0
    """Requests waiting for it (on a model that is not awake: they wait for its wake)."""
    rates: tuple[float, ...] = ()
    """Its request rate (requests/s) in the recent windows, oldest first."""
    idle_s: float = 0.0
    """Seconds since it last had a request in flight or queued."""
    idle_timeout_s: float = 300.0
    priority: int = 50
    moving: bool = False
    """A move of it is in progress: it is left alone."""
    previous: State | None = None
    """While a move is in progress, the state it leaves (``state`` is the one it goes to): until the move
    ends the model holds the larger of both states' GPU and host bytes."""
    reloadable: bool = True
    """Its weights can be reloaded from disk (level 2 possible; not with ``load_format: dummy``)."""

    def gpu(self, state: State) -> int:
        """GPU bytes it holds in ``state`` (the larger of both while it moves from ``previous``)."""
        held = self.footprint.gpu(state)
        return held if self.previous is None else max(held, self.footprint.gpu(self.previous))

    def host(self, state: State) -> int:
        held = self.footprint.host(state)
        return held if self.previous is None else max(held, self.footprint.host(self.previous))

    @property
    def busy(self) -> bool:
        return self.in_flight > 0 or self.queued > 0


@dataclass(frozen=True, slots=True)
class DeviceSnapshot:
    """One device: its budgets and its on-demand models (what else it holds is outside ``gpu_budget``)."""

    device: str
    gpu_budget: int
    """Bytes the on-demand models may hold on the GPU together."""
    host_budget: int
    """Bytes of host RAM the level-1 sleepers' weights may take together."""
    models: tuple[ModelView, ...]
