"""One cell of the fault matrix (a fault on a topology) as the checkers found it, its targets, and the
table the suite prints and docs/measurements keeps."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

REGISTRY_TARGET_S = 10.0
MUST_ANSWER = frozenset({"none", "slow-health", "reset-before-write", "stop-supervisor", "hup-supervisor",
                         "kill9-supervisor", "client-cut-retry"})  # fmt: skip
"""Faults off the request path (or a client's own cut and retry): the replicas serve on, so every request
must be answered (but 429s)."""


@dataclass
class Cell:
    """One fault on one topology: what the checkers found (lists: the offending items, described)."""

    fault: str
    topology: str
    seed: int
    note: str = ""
    sent: int = 0
    answered: int = 0
    clear: int = 0
    at_engines: int = 0
    rerun_after_kill: int = 0
    continued: int = 0
    ran_twice: list[str] = field(default_factory=list)
    no_answer: list[str] = field(default_factory=list)
    needless_errors: list[str] = field(default_factory=list)
    """Clear errors (but 429s) after a fault that must fail no request (:data:`MUST_ANSWER`)."""
    cut_streams: list[str] = field(default_factory=list)
    capacity_held: list[str] = field(default_factory=list)
    not_dropped: list[str] = field(default_factory=list)
    """A slow reader's stream the gateway did not end as it must (checks.not_dropped)."""
    task_failures: dict[str, float] = field(default_factory=dict)
    task_deaths: list[str] = field(default_factory=list)
    exits: list[str] = field(default_factory=list)
    """Processes of the stack that exited during the cell (name, status: negative is the signal)."""
    orphans: list[str] = field(default_factory=list)
    registry_back_s: float | None = None
    redis_outage: bool = False
    clear_errors: dict[str, int] = field(default_factory=dict)
    not_injected: str = ""
    problems: list[str] = field(default_factory=list)

    def violations(self) -> dict[str, Any]:
        """Every target of issue 43 this cell missed (empty: it met them all)."""
        out: dict[str, Any] = {}
        for name in (
            "ran_twice",
            "no_answer",
            "needless_errors",
            "cut_streams",
            "capacity_held",
            "not_dropped",
            "task_deaths",
            "orphans",
        ):
            if getattr(self, name):
                out[name] = getattr(self, name)[:5]
        late = self.registry_back_s is None or self.registry_back_s > REGISTRY_TARGET_S
        if self.redis_outage and late:
            out["registry_back_s"] = self.registry_back_s
        if self.problems:
            out["problems"] = self.problems
        return out


COLUMNS = ("fault", "topology", "sent", "answered", "clear", "twice", "no answer", "needless", "cut", "held",
           "deaths", "orphans", "registry")  # fmt: skip


def row(c: Cell) -> str:
    reg = (
        "-"
        if not c.redis_outage
        else ("never" if c.registry_back_s is None else f"{c.registry_back_s:.1f} s")
    )
    cells = [c.fault, c.topology, c.sent, c.answered, c.clear, len(c.ran_twice), len(c.no_answer),
             len(c.needless_errors), len(c.cut_streams), len(c.capacity_held), len(c.task_deaths),
             len(c.orphans), reg]  # fmt: skip
    status = "NOT INJECTED" if c.not_injected else ("ok" if not c.violations() else "FAIL")
    return " | ".join(str(x) for x in cells) + f" | {status} | {c.note}"


def table(cells: list[Cell], seed: int, date: str) -> str:
    """The table as Markdown (docs/measurements), with the details of each failing cell under it."""
    lines = [f"seed {seed}, {date}", "", "| " + " | ".join([*COLUMNS, "verdict", "what happened"]) + " |",
             "|" + "---|" * (len(COLUMNS) + 2)]  # fmt: skip
    lines += ["| " + row(c) + " |" for c in cells]
    for c in cells:
        if c.violations():
            lines.append(f"- {c.fault} ({c.topology}): {json.dumps(c.violations())[:600]}")
    return "\n".join(lines)
