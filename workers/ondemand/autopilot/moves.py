"""The autopilot's output: one move of one model, with the state it leads to and its reason."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workers.ondemand.autopilot.snapshot import State

MoveKind = Literal["wake", "sleep1", "sleep2", "stop", "start"]
"""wake (from level 1 or 2), sleep at level 1 or 2, stop the process, start it (a cold start)."""

TARGET: dict[MoveKind, State] = {
    "wake": "awake",
    "start": "awake",
    "sleep1": "asleep1",
    "sleep2": "asleep2",
    "stop": "stopped",
}
"""The state each move leads to."""


@dataclass(frozen=True, slots=True)
class Move:
    model: str
    kind: MoveKind
    reason: str
    urgent: bool = False
    """On a waiting request's path (the wake it waits for, or a sleep that makes its room)."""

    @property
    def target(self) -> State:
        return TARGET[self.kind]

    def line(self) -> str:
        """The decision as one log line."""
        return f"model={self.model} {self.kind}{' (urgent)' if self.urgent else ''}: {self.reason}"


def wake_kind(state: State) -> MoveKind:
    """The move that brings a model in ``state`` awake."""
    return "start" if state == "stopped" else "wake"
