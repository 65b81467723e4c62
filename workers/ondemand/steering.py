"""The autopilot carried out by the activator (issue 44): per device, a snapshot of what the activator knows
(:mod:`workers.ondemand.pilot`), the policy's moves, and each move through the owner's verbs.

* Each tick (:meth:`Steering.step`): the moves in the background (the idle timeout, headroom, wakes
  ahead), each as a task of its own like any sleep or wake of the activator.
* A waiting request's wake (:meth:`Steering.wake`): the same policy names the models that sleep first to
  make its room (at the level whose sleep is fastest), or refuses when none can.

A model with anything in flight, queued or a move in progress is never moved (the policy's rule; the
owner's drain lets what runs finish in any case). ``defaults.autopilot: false`` in the fleet turns this off:
the activator then runs its previous policy (idle timeout, least recently used room)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from llmgw_contract.registry import ROUTABLE, ReplicaState
from workers.converge.actions import device_key
from workers.life.replica import Replica
from workers.ondemand.autopilot.costs import CostedMove
from workers.ondemand.autopilot.moves import Move
from workers.ondemand.autopilot.snapshot import State
from workers.ondemand.ledger import UNMEASURED_ASLEEP_BYTES
from workers.ondemand.pilot import Pilot, Seen, cause, sleep_level, waking_move
from workers.ondemand.sleepers.level import SleepLevel

if TYPE_CHECKING:
    from workers.ondemand.activator import Activator

log = logging.getLogger("llmgw.ondemand")
GIB = 1 << 30
SLEPT: dict[SleepLevel, CostedMove] = {0: "stop", 1: "sleep1", 2: "sleep2"}
Reading = tuple[bool, bool]
"""One tick's reading of a model: busy (in flight, queued or asked for), asked (a wake request)."""


def lane(r: Replica) -> str:
    kind, index = device_key(r.spec.device_kind, r.spec.device)
    return f"{kind}:{index}"


class Steering:
    """The autopilot's moves for the activator's on-demand models."""

    def __init__(self, act: Activator) -> None:
        self.act = act
        self.pilot = Pilot(act.metrics)
        self.ahead: set[str] = set()
        """Models whose wake the policy began ahead of a request (logged once, with that reason)."""
        self.planned: dict[str, tuple[State, asyncio.Future[None]]] = {}
        """Models a waiting request's wake moves (its own wake, its room's sleeps), from its plan until the
        move ended: the state each goes to (the next plans book it so, moving) and that move's end."""
        self.scaled_down: set[str] = set()
        """Models the scaler put to sleep for a scale-down (it wakes or stops them): while asleep, the
        policy does not move them (a wake ahead would undo the scale-down, and the two would alternate)."""

    def on(self) -> bool:
        """The fleet's ``defaults.autopilot`` (on without a fleet)."""
        fleet = self.act.fleet()
        return fleet is None or fleet.defaults.autopilot

    def lanes(self) -> dict[str, list[Replica]]:
        out: dict[str, list[Replica]] = {}
        for r in self.act.sup.replicas:
            if not r.retired:
                out.setdefault(lane(r), []).append(r)
        return out

    def bytes_awake(self, r: Replica) -> int:
        act = self.act
        if r.on_gpu:
            return act.gpu.book(r).awake.get(r.spec.id, act.estimate(r))
        return act.measured.get(r.spec.model.name) or act.estimate(r)

    def seen(self, r: Replica, reading: Reading, now: float, waking: str = "") -> Seen:
        """``r``'s model as the activator knows it (``waking``: the model whose wake is being planned)."""
        act, name = self.act, r.spec.model.name
        asleep = act.gpu.book(r).asleep.get(r.spec.id, UNMEASURED_ASLEEP_BYTES) if r.on_gpu else 0
        if r.state is ReplicaState.READY:  # woken (demand came back) or started again
            self.scaled_down.discard(name)
        planned = self.planned.get(name, (None, None))[0] if name != waking else None
        moving = name != waking and (
            name in act.wakes or name in act.sleeping or name in self.scaled_down or planned is not None
        )
        idle_s = now - act.last_used.get(name, now)
        busy, asked = reading
        return Seen(
            r, act.model(r), act.levels.get(r.spec.id, 0), self.bytes_awake(r), asleep, act.weights(r),
            act.choice.sleep_mode(r), busy, asked or name == waking, idle_s, moving, planned,
        )  # fmt: skip

    def budgets(self, replicas: Sequence[Replica]) -> tuple[int | None, int]:
        """Bytes the device's on-demand models may hold awake together (None: not known yet: no reading of
        the card, no host reading), and host RAM for level-1 sleepers."""
        act = self.act
        fleet = act.fleet()
        host = int((fleet.defaults.sleep_host_ram_gib if fleet is not None else 0.0) * GIB)
        alive = [r for r in replicas if r.process.alive]
        always = sum(self.bytes_awake(r) for r in alive if not act.model(r).on_demand)
        first = replicas[0]
        if first.on_gpu:
            card = act.budget() or act.gpu.total.get(first.spec.device)
            return (None if card is None else card - act.gpu.book(first).baseline - always), host
        budget = act.budget()
        if budget is not None:
            return budget - always, 0
        free = act.free_bytes()
        ours = sum(self.bytes_awake(r) for r in alive if act.model(r).on_demand and r.state in ROUTABLE)
        return (None if free is None else free + ours), 0

    def models(self, replicas: Sequence[Replica], waking: Replica | None = None) -> list[Replica]:
        """One replica per on-demand model of the device (``waking`` for its own model)."""
        out: dict[str, Replica] = {}
        for r in replicas:
            if self.act.model(r).on_demand:
                out.setdefault(r.spec.model.name, r)
        if waking is not None:
            out[waking.spec.model.name] = waking
        return list(out.values())

    async def step(self, now: float, readings: Mapping[str, Reading]) -> None:
        """One tick: the background moves (not those a waiting request's wake carries out itself)."""
        for device, replicas in self.lanes().items():
            models = self.models(replicas)
            if not models:
                continue
            gpu, host = self.budgets(replicas)
            seen = [self.seen(r, readings.get(r.spec.model.name, (False, False)), now) for r in models]
            snap = self.pilot.snapshot(device, gpu, host, seen, now)
            for move in self.pilot.decide(snap, headroom=gpu is not None):
                if not move.urgent:
                    self.carry(device, move, replicas)

    def carry(self, device: str, move: Move, replicas: Sequence[Replica]) -> None:
        mine = [r for r in replicas if r.spec.model.name == move.model]
        if move.kind in ("wake", "start"):
            asleep = [r for r in mine if r.state is ReplicaState.ASLEEP]
            if asleep:
                self.pilot.carried(device, move)
                self.ahead.add(move.model)
                self.act.spawn_wake(move.model, asleep, move.reason)
            return
        awake = [r for r in mine if r.state in ROUTABLE]
        if awake:
            self.pilot.carried(device, move)
            self.act.spawn_sleep(move.model, awake, move.reason, cause(move), move)

    def level(self, r: Replica, move: Move) -> SleepLevel:
        return sleep_level(move, self.act.model(r), self.act.choice.sleep_mode(r))

    async def plan_wake(self, r: Replica) -> list[Move] | None:
        """The policy's moves for ``r``'s model to wake now: the sleeps that make its room, then its wake;
        [] when the room is not known (no reading: the engine's own start-up check decides); None when it
        does not fit."""
        act = self.act
        replicas = self.lanes().get(lane(r), [r])
        if r.on_gpu and await act.gpu.read_gpu(r) is None:
            return []
        gpu, host = self.budgets(replicas)
        if gpu is None:
            return []
        now, name = time.monotonic(), r.spec.model.name
        seen = []
        for x in self.models(replicas, waking=r):
            other = x.spec.model.name
            busy = other != name and (other in act.sleeping or await act.busy(other))
            seen.append(self.seen(x, (busy, False), now, waking=name))
        snap = self.pilot.snapshot(lane(r), gpu, host, seen, now)
        moves = self.pilot.decide_wake(snap, name)
        return moves if any(m.model == name and m.kind in ("wake", "start") for m in moves) else None

    async def wake(self, r: Replica, why: str) -> bool:
        """Wake ``r`` for a waiting request: the policy's room first, then the start. With no room now (every
        model that could give it is busy or moving) the wake stays pending, as in the simulation: planned
        again after the sleeps in progress or a tick, until the model's ``wake_timeout_s``; False past it.
        The plan holds the activator's room lock, and its moves are booked (:attr:`planned`) for the next
        plans; a wake from level 1 or 2 is then carried out beside the others (its room's sleeps begin at
        once; it starts once they and every room sleep planned before it ended); a start from nothing keeps
        the lock to its end (one start at a time per device: decision 0007)."""
        act = self.act
        deadline = time.monotonic() + act.model(r).wake_timeout_s
        while True:
            async with act.room:
                moves = await self.plan_wake(r)
                if moves is not None and (not r.process.alive or act.levels.get(r.spec.id, 0) == 0):
                    return await self.carry_wake(r, why, moves, [])
                before = [end for state, end in self.planned.values() if state != "awake"]
                mine = self.book(moves or [])
            if moves is not None:
                try:
                    return await self.carry_wake(r, why, moves, before, mine)
                finally:
                    self.ended(mine)
            if time.monotonic() >= deadline or act.closing.is_set() or act.sup.stopping.is_set():
                break
            if act.sleeping:  # memory on its way back
                await asyncio.gather(*act.sleeping.values(), return_exceptions=True)
            else:
                await asyncio.sleep(act.options.tick_s)
        log.error("replica=%s cannot wake: the autopilot found no room in %.0f s (idle models of priority "
                  "<= %d asleep would not give back enough)", r.spec.id, act.model(r).wake_timeout_s,
                  act.model(r).priority)  # fmt: skip
        return False

    def book(self, moves: Sequence[Move]) -> dict[str, asyncio.Future[None]]:
        """Each move's model booked in :attr:`planned` at the state it goes to; their ends."""
        loop = asyncio.get_running_loop()
        mine = {m.model: loop.create_future() for m in moves}
        for m in moves:
            self.planned[m.model] = (m.target, mine[m.model])
        return mine

    def ended(self, ends: Mapping[str, asyncio.Future[None]]) -> None:
        """These booked moves are over: their ends set, out of :attr:`planned`."""
        for name, end in ends.items():
            if not end.done():
                end.set_result(None)
            if self.planned.get(name, (None, None))[1] is end:
                del self.planned[name]

    async def carry_wake(
        self,
        r: Replica,
        why: str,
        moves: Sequence[Move],
        before: Sequence[asyncio.Future[None]],
        mine: Mapping[str, asyncio.Future[None]] | None = None,
    ) -> bool:
        """The room's sleeps (at once), then, once they and the room sleeps planned ``before`` ended (the
        memory this plan counted free), the start."""
        act = self.act
        device, ahead = lane(r), r.spec.model.name in self.ahead
        self.ahead.discard(r.spec.model.name)
        sleeps = []
        for move in moves:
            if move.model == r.spec.model.name:
                if not ahead:  # a wake ahead was logged and counted when it began
                    self.pilot.carried(device, move)
                continue
            self.pilot.carried(device, move)
            for v in self.lanes().get(device, []):
                if v.spec.model.name == move.model and v.state in ROUTABLE:
                    why_v = f"room for {r.spec.id}: {move.reason}"
                    sleeps.append(act.sleep(v, why_v, "room", self.level(v, move)))
        await asyncio.gather(*sleeps)
        self.ended({k: v for k, v in (mine or {}).items() if k != r.spec.model.name})
        await asyncio.gather(*(asyncio.shield(end) for end in before))
        return await act.start(r, why)

    def slept(self, model: str, level: SleepLevel, seconds: float, reason: str = "idle") -> None:
        """A sleep at ``level`` took ``seconds`` (drain excluded): its learned cost. A scale-down's sleep
        (``reason`` scale_down) leaves the model to the scaler while it sleeps: no wake ahead of demand."""
        self.pilot.measured(model, SLEPT[level], seconds)
        if reason == "scale_down":
            self.scaled_down.add(model)

    def woke(self, model: str, level: SleepLevel, alive: bool, seconds: float) -> None:
        """A wake from ``level`` (``alive``: its process was kept) took ``seconds``: its learned cost."""
        self.pilot.measured(model, waking_move(level, alive), seconds)
