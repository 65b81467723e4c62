"""A simulated GPU for the residency benchmark (pure, simulated clock: a 10-minute trace replays in well
under a second): each model's state, the moves in progress (each takes the H200's recorded seconds), the
requests running and waiting, and the GPU and host-RAM bytes held.

What it holds: a model moving holds the larger of its two states' bytes until the move ends (a wake
allocates as it goes, a sleep gives back at its end). A wake that does not fit waits for room (counted:
the wake needed a prior sleep). A request runs on an awake model while it has a free slot (``capacity``:
how many requests its KV cache holds at once), else it waits; its first token comes
:data:`~bench.residency.h200.FIRST_TOKEN_S` after it starts, its end ``service_s`` later."""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bench.residency.h200 import FIRST_TOKEN_S
from bench.residency.trace import Request
from workers.ondemand.autopilot.costs import CostedMove, wake_move
from workers.ondemand.autopilot.moves import TARGET, MoveKind
from workers.ondemand.autopilot.policy import SLEEP_COST
from workers.ondemand.autopilot.snapshot import Footprint, State


@dataclass(slots=True)
class Served:
    model: str
    arrived: float
    state: str
    """The model's state when the request arrived (``asleep1 -> awake`` while moving)."""
    ttft_s: float


@dataclass(slots=True)
class Slot:
    name: str
    state: State
    capacity: int
    target: State | None = None
    """The state a move in progress leads to."""
    pending: bool = False
    """A wake waits for room."""
    running: int = 0
    queue: deque[tuple[Request, str]] = field(default_factory=deque)
    last_busy: float = 0.0
    arrivals: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.state if self.target is None else f"{self.state} -> {self.target}"

    @property
    def busy(self) -> bool:
        return self.running > 0 or bool(self.queue)


@dataclass(slots=True)
class Device:
    footprint: Footprint
    gpu_budget: int
    host_budget: int
    seconds: Mapping[CostedMove, float]
    slots: dict[str, Slot]
    now: float = 0.0
    events: list[tuple[float, int, str, str, object]] = field(default_factory=list)
    seq: itertools.count[int] = field(default_factory=itertools.count)
    served: list[Served] = field(default_factory=list)
    wakes: int = 0
    wakes_after_sleep: int = 0
    moves: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    over_budget: int = 0
    timeline: list[tuple[float, str, str]] = field(default_factory=list)
    took: list[tuple[str, CostedMove, float]] = field(default_factory=list)
    """Moves ended since the policy last read them: (model, move, seconds)."""

    @classmethod
    def build(
        cls, states: Mapping[str, State], capacity: int, footprint: Footprint, gpu_budget: int,
        host_budget: int, seconds: Mapping[CostedMove, float],
    ) -> Device:  # fmt: skip
        slots = {n: Slot(n, s, capacity) for n, s in states.items()}
        dev = cls(footprint, gpu_budget, host_budget, seconds, slots)
        dev.timeline = [(0.0, n, s) for n, s in states.items()]
        return dev

    def push(self, at: float, kind: str, model: str, data: object = None) -> None:
        heapq.heappush(self.events, (at, next(self.seq), kind, model, data))

    def held(self, s: Slot) -> tuple[int, int]:
        """GPU and host bytes ``s`` holds now."""
        f, states = self.footprint, [s.state] if s.target is None else [s.state, s.target]
        return max(f.gpu(x) for x in states), max(f.host(x) for x in states)

    def used(self, but: Slot | None = None) -> tuple[int, int]:
        held = [self.held(s) for s in self.slots.values() if s is not but]
        return sum(g for g, _ in held), sum(h for _, h in held)

    def arrive(self, r: Request) -> None:
        s = self.slots[r.model]
        s.arrivals.append(self.now)
        s.queue.append((r, s.label))
        self.serve_queue(s)

    def serve_queue(self, s: Slot) -> None:
        while s.queue and s.state == "awake" and s.target is None and s.running < s.capacity:
            r, state = s.queue.popleft()
            s.running += 1
            self.served.append(Served(r.model, r.t, state, self.now - r.t + FIRST_TOKEN_S))
            self.push(self.now + FIRST_TOKEN_S + r.service_s, "finish", r.model)
        if s.busy:
            s.last_busy = self.now

    def finish(self, model: str) -> None:
        s = self.slots[model]
        s.running -= 1
        s.last_busy = self.now
        self.serve_queue(s)

    def apply(self, model: str, kind: MoveKind) -> None:
        """Begin one move (a wake that does not fit waits for room); a move the device refuses is counted."""
        s = self.slots[model]
        waking = kind in ("wake", "start")
        if waking and s.pending:
            return  # asked again while it waits for room
        if s.target is not None or s.pending or (s.state == "awake") == waking or (not waking and s.busy):
            self.refused += 1
            return
        if waking:
            self.wakes += 1
            s.pending = True
            if not self.begin_wake(s):
                self.wakes_after_sleep += 1
            return
        _, host = self.used(s)
        if host + self.footprint.host(TARGET[kind]) > self.host_budget:
            self.over_budget += 1
            return
        self.begin(s, kind, TARGET[kind], SLEEP_COST[kind])

    def begin_wake(self, s: Slot) -> bool:
        gpu, _ = self.used(s)
        if gpu + self.footprint.awake > self.gpu_budget:
            return False
        s.pending = False
        self.begin(s, "wake", "awake", wake_move(s.state))
        return True

    def begin(self, s: Slot, kind: str, target: State, costed: CostedMove) -> None:
        self.moves[costed] = self.moves.get(costed, 0) + 1
        s.target = target
        self.timeline.append((self.now, s.name, s.label))
        self.push(self.now + self.seconds[costed], "moved", s.name, (costed, self.now))

    def moved(self, model: str, data: object) -> None:
        s = self.slots[model]
        assert s.target is not None and isinstance(data, tuple)
        s.state, s.target = s.target, None
        self.took.append((model, data[0], self.now - data[1]))
        self.timeline.append((self.now, model, s.state))
        self.serve_queue(s)
        for other in self.slots.values():
            if other.pending:
                self.begin_wake(other)

    def rates(self, s: Slot, window_s: float, windows: int) -> tuple[float, ...]:
        """Requests/s in the last ``windows`` windows of ``window_s``, oldest first."""
        edges = [self.now - window_s * (windows - i) for i in range(windows + 1)]
        counts = [sum(1 for t in s.arrivals[-500:] if a <= t < b) for a, b in itertools.pairwise(edges)]
        return tuple(c / window_s for c in counts)

    def settled(self) -> bool:
        return all(not s.busy and s.target is None for s in self.slots.values())


DRAIN_S = 600.0
"""After the trace, the device runs at most this long for the requests still waiting (then unserved)."""


def replay(dev: Device, trace: Sequence[Request], decide: object, tick_s: float, end_s: float) -> Device:
    """Replay ``trace`` on ``dev``; ``decide(dev)`` returns the moves to begin ((model, kind) pairs) and
    is called after every event and every ``tick_s``, until ``end_s`` and every request is served."""
    assert callable(decide)
    for r in trace:
        dev.push(r.t, "arrive", r.model, r)
    dev.push(0.0, "tick", "")
    while dev.events:
        dev.now, _, kind, model, data = heapq.heappop(dev.events)
        if kind == "arrive":
            assert isinstance(data, Request)
            dev.arrive(data)
        elif kind == "finish":
            dev.finish(model)
        elif kind == "moved":
            dev.moved(model, data)
        elif dev.now < end_s or (not dev.settled() and dev.now < end_s + DRAIN_S):
            dev.push(dev.now + tick_s, "tick", "")
        for name, move in decide(dev):
            dev.apply(name, move)
    return dev
