"""The learned cost of each move, per model: seconds, an exponentially weighted moving average of what
each move took, seeded from the fleet or from measured numbers (:data:`H200_SECONDS`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from workers.ondemand.autopilot.snapshot import State

CostedMove = Literal["wake1", "wake2", "sleep1", "sleep2", "start", "stop"]
"""wake from level 1 / level 2, sleep at level 1 / level 2, cold start, stop."""

H200_SECONDS: Mapping[CostedMove, float] = {
    "sleep1": 9.9,  # POST /sleep?level=1: 9.4-10.4 s (13.04 GiB copied to the host)
    "wake1": 0.33,  # POST /wake_up after level 1: 0.32-0.34 s
    "sleep2": 0.055,  # POST /sleep?level=2: 0.04-0.07 s
    "wake2": 2.55,  # weights + reload_weights + kv_cache: 2.3-2.8 s (page cache warm)
    "start": 87.7,  # start to /health with real weights, warm machine
    "stop": 0.0,  # not measured: the process ends, its memory is given back
}
"""One Llama-2-7B-shaped bf16 model on the lent H200 (/work/shared/gpu/sleep-mode.md, measured
2026-12-03): the middle of each measured range."""


def wake_move(state: State) -> CostedMove:
    """The costed move that brings a model in ``state`` awake."""
    return {"asleep1": "wake1", "asleep2": "wake2"}.get(state, "start")  # type: ignore[return-value]


@dataclass(slots=True)
class CostTable:
    """Seconds per (model, move): ``seed`` until measured, then an EWMA with weight ``alpha`` per sample."""

    seed: Mapping[CostedMove, float] = field(default_factory=lambda: dict(H200_SECONDS))
    alpha: float = 0.3
    learned: dict[tuple[str, CostedMove], float] = field(default_factory=dict)

    def cost(self, model: str, move: CostedMove) -> float:
        return self.learned.get((model, move), self.seed[move])

    def observe(self, model: str, move: CostedMove, seconds: float) -> None:
        """Fold one measured move into the model's average (the first sample replaces the seed)."""
        old = self.learned.get((model, move))
        self.learned[(model, move)] = seconds if old is None else old + self.alpha * (seconds - old)
