"""The GPU side of models on demand: one ledger per card (:class:`workers.ondemand.ledger.DeviceBook`),
every wake and sleep measured with nvidia-smi (per process) and logged beside the ledger's prediction of
the card, and the ledger's answer to "does this replica fit if it wakes now"."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from llmgw_contract.fleet import Model
from llmgw_contract.registry import ReplicaState
from llmgw_contract.replica_metrics import SupervisorMetrics
from workers.host.gpu import GpuReader, GpuReading
from workers.host.rss import tree_pids
from workers.life.replica import Replica
from workers.ondemand.ledger import DeviceBook, Holding, Slot, Stillness
from workers.ondemand.room import Room
from workers.ondemand.sleeping import SleepChoice

log = logging.getLogger("llmgw.ondemand")
CHANGING = (ReplicaState.WAKING, ReplicaState.DRAINING)


class Replicas(Protocol):
    @property
    def replicas(self) -> Sequence[Replica]: ...


class ActivatorOptionsView(Protocol):
    @property
    def gpu_settle_s(self) -> float: ...

    @property
    def gpu_settle_deadline_s(self) -> float: ...


class OnDemand(Protocol):
    """What the GPU ledgers read of the activator."""

    @property
    def sup(self) -> Replicas: ...

    @property
    def choice(self) -> SleepChoice: ...

    estimate: Callable[[Replica], int]
    last_used: dict[str, float]
    sleeping: dict[str, asyncio.Task[bool]]
    gpu_reading: GpuReader
    metrics: SupervisorMetrics

    def model(self, r: Replica) -> Model: ...
    def budget(self) -> int | None: ...

    @property
    def options(self) -> ActivatorOptionsView: ...
    async def busy(self, model: str) -> bool: ...


class GpuRoom:
    """The ledgers of the activator's GPUs."""

    def __init__(self, act: OnDemand) -> None:
        self.act = act
        self.books: dict[int, DeviceBook] = {}
        """GPU index -> its ledger."""
        self.still: dict[int, Stillness] = {}
        """GPU index -> when its replicas last changed (a reading is booked once they are still)."""
        self.settling: set[str] = set()
        """Replicas whose change is over, waiting for the others to be still before their reading."""
        self.total: dict[int, int] = {}
        """GPU index -> the card's total bytes at its last reading."""

    def stillness(self, r: Replica) -> Stillness:
        return self.still.setdefault(r.spec.device, Stillness(self.act.options.gpu_settle_s))

    def changed(self, r: Replica) -> None:
        """``r``'s wake or sleep just ended (its memory may still move for a while)."""
        self.stillness(r).changed(r.spec.id, time.monotonic())

    def others_changing(self, r: Replica) -> list[str]:
        """The other replicas of ``r``'s GPU in the middle of a wake or a sleep."""
        return [
            x.spec.id for x in self.act.sup.replicas
            if x is not r and x.on_gpu and x.spec.device == r.spec.device and x.state in CHANGING
            and x.spec.id not in self.settling
        ]  # fmt: skip

    async def until_still(self, r: Replica) -> float:
        """Wait until every other replica of the GPU is still (:class:`Stillness`), at most
        ``gpu_settle_deadline_s``; returns the seconds waited (logged with the reading)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self.act.options.gpu_settle_deadline_s
        self.settling.add(r.spec.id)
        try:
            while loop.time() < deadline:
                wait = self.stillness(r).wait_s(r.spec.id, bool(self.others_changing(r)), time.monotonic())
                if wait == 0.0:
                    return loop.time() - started
                await asyncio.sleep(min(wait or 0.1, deadline - loop.time(), 0.5))
        finally:
            self.settling.discard(r.spec.id)
        log.warning("replica=%s gpu:%d not still after %.0f s: booked unsettled", r.spec.id, r.spec.device,
                    self.act.options.gpu_settle_deadline_s)  # fmt: skip
        return loop.time() - started

    def book(self, r: Replica) -> DeviceBook:
        return self.books.setdefault(r.spec.device, DeviceBook())

    def slots(self, r: Replica, busy: frozenset[str] = frozenset()) -> list[Slot]:
        """Every live-or-asleep replica on ``r``'s GPU as the ledger sees it (``busy``: the on-demand models
        with requests in flight or queued, never put to sleep to make room)."""
        out = []
        for x in self.act.sup.replicas:
            if x.retired or not x.on_gpu or x.spec.device != r.spec.device:
                continue
            holding: Holding = "stopped"
            if x.process.alive:
                holding = "asleep" if x.state is ReplicaState.ASLEEP else "awake"
            m = self.act.model(x)
            used = self.act.last_used.get(m.name, 0.0)
            out.append(Slot(
                x.spec.id, m.name, holding, self.act.estimate(x), m.priority, used,
                busy=not m.on_demand or m.name in busy or m.name in self.act.sleeping,
                sleeps_in_place=self.act.choice.sleep_mode(x),
            ))  # fmt: skip
        return out

    async def read_gpu(self, r: Replica) -> GpuReading | None:
        """nvidia-smi for ``r``'s GPU; refreshes the ledger's baseline (the card beyond our processes)."""
        reading = await asyncio.to_thread(self.act.gpu_reading, r.spec.device)
        if reading is not None:
            self.total[r.spec.device] = reading.card.total_bytes
            ours = await asyncio.to_thread(self.our_pids)
            self.book(r).baseline = max(0, reading.card.used_bytes - reading.held_by(ours))
        return reading

    def our_pids(self) -> set[int]:
        """The processes of every supervised GPU replica (servers and engine cores)."""
        return set().union(*(self.pids(x) for x in self.act.sup.replicas if x.on_gpu))

    @staticmethod
    def pids(r: Replica) -> set[int]:
        pid = r.process.pid
        return tree_pids(pid) if pid is not None and r.process.alive else set()

    async def measure_gpu(
        self, r: Replica, holding: Holding, step: str, still: Callable[[], bool] = lambda: True
    ) -> int | None:
        """Measure what ``r`` holds now (nvidia-smi, its process tree) and record it in the ledger; log the
        ledger's prediction of the card at that moment (every replica at what it last measured in its
        holding, ``r`` too, or the estimate before its first measurement) beside the card's reading, and
        which other models were changing then (waking or going to sleep: not settled). Returns the bytes
        (None: no reading, or ``still()`` false once the card is still: ``r`` moved meanwhile)."""
        self.changed(r)
        waited = await self.until_still(r)
        if not still():
            log.info("replica=%s %s: not booked, it moved before the card was still", r.spec.id, step)
            return None
        predicted = self.book(r).predicted_used(self.slots(r), {r.spec.id: holding})
        changing = self.others_changing(r)
        reading = await asyncio.to_thread(self.act.gpu_reading, r.spec.device)
        if reading is None:
            log.warning("replica=%s %s: nvidia-smi did not answer, ledger not updated", r.spec.id, step)
            return None
        held = reading.held_by(await asyncio.to_thread(self.pids, r))
        ours = await asyncio.to_thread(self.our_pids)
        self.book(r).record(r.spec.id, holding, held, reading.card.used_bytes, reading.held_by(ours))
        self.act.metrics.resident.labels(r.spec.model.name, r.spec.id).set(held)
        card = reading.card.used_bytes
        off = f"{(predicted - card) / reading.card.total_bytes * 100:+.2f} %"
        log.info(
            "ledger gpu:%d after %s of replica=%s: it holds %d MiB; predicted %d MiB, card %d MiB "
            "(%s of %d MiB); changing: %s; the others still for %.2f s (waited %.2f s)", r.spec.device, step,
            r.spec.id, held >> 20, predicted >> 20, card >> 20, off, reading.card.total_bytes >> 20,
            ",".join(changing) or "none", self.still_for(r), waited,
        )  # fmt: skip
        return held

    def still_for(self, r: Replica) -> float:
        others = [t for x, t in self.stillness(r).changed_at.items() if x != r.spec.id]
        return time.monotonic() - max(others) if others else float("inf")

    async def gpu_room(self, r: Replica) -> Room:
        """The GPU ledger's answer for waking ``r``: room on the card (``defaults.memory_budget_gib`` when
        set, else the card's total), what the others hold, what each idle one gives back asleep."""
        reading = await self.read_gpu(r)
        if reading is None:
            return Room()  # no reading: vLLM's own start-up check decides
        busy = frozenset(
            [m for m in {x.spec.model.name for x in self.act.sup.replicas} if await self.act.busy(m)]
        )
        capacity = self.act.budget() or reading.card.total_bytes
        slots = self.slots(r, busy)
        waking = next(s for s in slots if s.replica == r.spec.id)
        return self.book(r).room(slots, waking, capacity)
