"""The phases of vLLM starts, read from a replica's log (appended across its starts): per start, the
seconds between its processes' first lines and its milestones. The log's clock has whole seconds, so each
phase is +-1 s. The time before the API server's first line (the interpreter's start and its imports) is
the measured start less ``logged_s``.

* ``api_s``: the API server's first line to the engine core's (its config, the engine core's spawn and
  imports);
* ``engine_s``: the engine core's first line to the worker's (the worker's spawn and imports);
* ``to_weights_s``: the worker's first line to the weights loaded (model init and the load);
* ``weights_s``: vLLM's own "Loading weights took" (two decimals);
* ``init_s``: the weights loaded to the engine's init (profile, KV cache, warm-up);
* ``serve_s``: the engine's init to "Starting vLLM server" (the API server's own set-up);
* ``logged_s``: the API server's first line to "Starting vLLM server".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

LINE = re.compile(r"^\((\w+)(?:-\d+)? pid=(\d+)\) \w+ (\d\d-\d\d \d\d:\d\d:\d\d)")
WEIGHTS = re.compile(r"Loading weights took ([\d.]+) seconds")


@dataclass
class Start:
    """One start's first line per process kind and its milestones (``MM-DD HH:MM:SS`` of ``year``)."""

    year: int
    api_pid: str
    first: dict[str, datetime] = field(default_factory=dict)
    weights_took_s: float | None = None

    def at(self, stamp: str) -> datetime:
        return datetime.strptime(f"{self.year}-{stamp}", "%Y-%m-%d %H:%M:%S")

    def phases(self) -> dict[str, float | None]:
        f = self.first

        def span(a: str, b: str) -> float | None:
            return (f[b] - f[a]).total_seconds() if a in f and b in f else None

        return {
            "api_s": span("APIServer", "EngineCore"),
            "engine_s": span("EngineCore", "Worker"),
            "to_weights_s": span("Worker", "weights"),
            "weights_s": self.weights_took_s,
            "init_s": span("weights", "init"),
            "serve_s": span("init", "serving"),
            "logged_s": span("APIServer", "serving"),
        }


def starts(text: str, year: int) -> list[Start]:
    """Each start in ``text`` (a new API server pid begins one), in the log's order."""
    found: list[Start] = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m is None:
            continue
        kind, pid, stamp = m.groups()
        if kind == "APIServer" and (not found or found[-1].api_pid != pid):
            found.append(Start(year, pid))
        if not found:
            continue
        s, t = found[-1], found[-1].at(stamp)
        s.first.setdefault(kind, t)
        if (w := WEIGHTS.search(line)) and "weights" not in s.first:
            s.first["weights"], s.weights_took_s = t, float(w.group(1))
        elif "init engine" in line:
            s.first.setdefault("init", t)
        elif "Starting vLLM server" in line:
            s.first.setdefault("serving", t)
    return found
