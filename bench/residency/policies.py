"""The three policies the residency benchmark compares on the same trace and simulated device:

* :class:`AutopilotPolicy`: :func:`workers.ondemand.autopilot.policy.decide` on a snapshot of the device
  after every event and tick, its costs learned from the moves the device carried out;
* :class:`TodayPolicy`: today's activator: a waiting request wakes its model, making room at that moment
  (:func:`workers.ondemand.room.make_room`: idle models, least recently used first, each asleep at the level
  :func:`workers.ondemand.sleepers.level.choose_level` picks: level 1 while the host RAM takes it), and an
  idle model sleeps after its idle timeout (:func:`workers.ondemand.room.idle_expired`);
* all awake: every model awake at 1/N of the card, never moved (:func:`capacity` says whether it fits).
"""

from __future__ import annotations

from bench.residency.device import Device, Slot
from bench.residency.h200 import H200_7B, KV_BYTES_PER_TOKEN, WEIGHTS_BYTES
from workers.ondemand.autopilot.costs import CostTable
from workers.ondemand.autopilot.moves import MoveKind, wake_kind
from workers.ondemand.autopilot.policy import AutopilotOptions, decide
from workers.ondemand.autopilot.snapshot import DeviceSnapshot, ModelView
from workers.ondemand.room import Resident, idle_expired, make_room
from workers.ondemand.sleepers.level import choose_level

Moves = list[tuple[str, MoveKind]]
WINDOW_S, WINDOWS = 10.0, 6
"""The request-rate history the autopilot sees: 6 windows of 10 s."""


def capacity(gpu_bytes: int, request_tokens: int) -> int:
    """Requests a model holds at once in ``gpu_bytes``: its KV cache (what the weights and the part that
    stays on the GPU asleep leave) over one request's tokens; 0: it does not fit."""
    kv = gpu_bytes - WEIGHTS_BYTES - H200_7B.asleep1
    return max(0, kv // (KV_BYTES_PER_TOKEN * request_tokens))


class AutopilotPolicy:
    name = "autopilot"

    def __init__(self, idle_timeout_s: float, options: AutopilotOptions | None = None) -> None:
        self.idle_timeout_s, self.costs = idle_timeout_s, CostTable()
        self.options = options or AutopilotOptions()
        self.decisions = 0

    def view(self, dev: Device, s: Slot) -> ModelView:
        moving = s.target is not None
        return ModelView(
            s.name, s.target or s.state, dev.footprint, in_flight=s.running, queued=len(s.queue),
            rates=dev.rates(s, WINDOW_S, WINDOWS), idle_s=0.0 if s.busy else dev.now - s.last_busy,
            idle_timeout_s=self.idle_timeout_s, moving=moving, previous=s.state if moving else None,
        )  # fmt: skip

    def __call__(self, dev: Device) -> Moves:
        for model, move, seconds in dev.took:
            self.costs.observe(model, move, seconds)
        dev.took.clear()
        snap = DeviceSnapshot("gpu:0", dev.gpu_budget, dev.host_budget,
                              tuple(self.view(dev, s) for s in dev.slots.values()))  # fmt: skip
        self.decisions += 1
        return [(m.model, m.kind) for m in decide(snap, self.costs, self.options)]


class TodayPolicy:
    name = "today"

    def __init__(self, idle_timeout_s: float) -> None:
        self.idle_timeout_s = idle_timeout_s

    def __call__(self, dev: Device) -> Moves:
        out: Moves = []
        planned: set[str] = set()
        for s in dev.slots.values():
            if s.queue and s.state != "awake" and s.target is None:  # a wake waiting for room: again
                out += [*self.room(dev, s, planned), (s.name, wake_kind(s.state))]
        for s in dev.slots.values():
            idle = idle_expired(s.busy, s.last_busy, dev.now, self.idle_timeout_s)
            if s.state == "awake" and s.target is None and s.name not in planned and idle:
                planned.add(s.name)
                out.append((s.name, self.level(dev, planned)))
        return out

    def level(self, dev: Device, planned: set[str]) -> MoveKind:
        """``choose_level("auto")``: level 1 while the weights fit beside the other level-1 sleepers."""
        held = sum(dev.held(s)[1] for s in dev.slots.values())
        held += sum(dev.footprint.host1 for _ in planned)  # conservative: planned sleeps at level 1
        return "sleep1" if choose_level("auto", dev.footprint.host1, dev.host_budget, held) == 1 else "sleep2"

    def room(self, dev: Device, s: Slot, planned: set[str]) -> Moves:
        """Today's at-the-moment eviction for waking ``s``."""
        residents = [
            Resident(x.name, x.name, dev.footprint.awake - dev.footprint.asleep1, 50, x.last_busy, x.busy)
            for x in dev.slots.values()
            if x.state == "awake" and x.target is None and x is not s and x.name not in planned
        ]
        gpu, _ = dev.used()
        need = dev.footprint.awake - dev.footprint.gpu(s.state)
        room = make_room(residents, need, dev.gpu_budget - gpu, 50)
        out: Moves = []
        for victim in room.evict:
            out.append((victim, self.level(dev, planned)))
            planned.add(victim)
        return out


def all_awake(dev: Device) -> Moves:
    """Every model stays awake."""
    return []
