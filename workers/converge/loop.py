"""The reconcile loop: reads the fleet file (at start, on SIGHUP, and when it changes on disk), and
carries out the decisions of :mod:`workers.converge.actions` through the supervisor, one action at a time per
device, until what runs matches the file.

Every action is one log line ``reconcile action=... replica=... reason=...`` and one count in
``llmgw_supervisor_actions_total{action,model,outcome}``.  An invalid file is refused with the fleet's
field-path error and the running fleet keeps serving.  A change that arrives during a pass sets the
watch's flag again, so the next pass takes it.

A replace starts the new replica beside the old one when the memory it needs is free (the host's on a
CPU, the device's on a GPU): the old one is published REPLACING (still routable), the new one starts and
becomes READY, then the old one drains and stops.  When the memory is not there, the old replica drains
and stops first (its requests wait in the gateways' queues) and the log says so.  A replacement that
fails to start is reported (FAILED, the ``failed`` outcome) and the old replica keeps serving; in the
stop-first order the old configuration is started again on its port. An asleep on-demand replica is not
started anew by a replace: its replacement is listed ASLEEP in its place (the activator starts it when a
request asks, through the room's ledger).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from llmgw_contract.fleet import Fleet, FleetError
from llmgw_contract.fleet_file import FleetWatch
from llmgw_contract.registry import ReplicaState
from llmgw_contract.replica_metrics import SupervisorMetrics
from llmgw_contract.supervision import guarded, raise_if_cancelled
from workers.converge.actions import (
    Action,
    Refusal,
    Replace,
    Running,
    Start,
    Stop,
    device_key,
    fingerprint,
    plan,
)
from workers.converge.headroom import Headroom
from workers.host.ports import port_taken
from workers.life.adopt import Entry, entry_for
from workers.life.owner import Replica, Supervisor
from workers.planner.budgets import BudgetError, PlannedBudgets
from workers.replica.launch import Launch, ReplicaSpec

log = logging.getLogger("llmgw.reconcile")

HeadroomProbe = Callable[[ReplicaSpec], Awaitable[Headroom]]
LaunchFor = Callable[[ReplicaSpec], Launch]
MAX_PASSES = 64


def with_plan(spec: ReplicaSpec, slot: int, planned: PlannedBudgets) -> tuple[ReplicaSpec, float | None]:
    """``spec`` at the planner's budget, and the back-off floor, where its model's budget is ``auto``."""
    plan = planned.get((spec.model.name, slot)) if spec.model.budget.auto else None
    if plan is None:
        return spec, None
    return dataclasses.replace(spec, gpu_memory_utilization=plan.gpu_memory_utilization), plan.backoff_floor


class Reconciler:
    """Drives the supervisor's replicas to the fleet file."""

    def __init__(
        self,
        sup: Supervisor,
        watch: FleetWatch,
        launch_for: LaunchFor,
        headroom: HeadroomProbe,
        log_dir: Path,
        n_devices: int,
        metrics: SupervisorMetrics | None = None,
    ) -> None:
        self.sup, self.watch, self.launch_for, self.headroom = sup, watch, launch_for, headroom
        self.log_dir, self.n_devices = log_dir, n_devices
        self.metrics = metrics or SupervisorMetrics()
        self.budgets: Callable[[Fleet], PlannedBudgets] = lambda fleet: {}
        """The planner's budgets of the fleet's ``auto`` models, by (model, slot); read on every load."""
        self.planned: PlannedBudgets = {}
        self.refused: set[Refusal] = set()
        self.retired_ids: set[str] = set()
        self.retired_ports: set[int] = set()
        self.fleet: Fleet | None = None
        self.passes = 0
        self.counts: dict[str, int] = {}
        """Replicas per model the supervisor's scaler wants (:mod:`workers.autoscale`); else ``replicas``.
        A model the scaler set starts its on-demand replicas at once (demand is there), not ASLEEP."""
        self.lock = asyncio.Lock()
        """One convergence at a time: the fleet's, or the scaler's."""

    async def run(self) -> None:
        """Read the fleet whenever the watch says so and converge to it, until the supervisor stops."""
        poller = asyncio.create_task(self.watch.poll())
        try:
            while not self.sup.stopping.is_set():
                raise_if_cancelled()  # a cancel swallowed in the last pass (llmgw_contract/supervision.py)
                await self.watch.wanted.wait()
                self.watch.wanted.clear()
                fleet = self.load()
                if fleet is not None:
                    self.fleet = fleet
                    await guarded("reconcile", self.apply(fleet), self.failed)
        finally:
            poller.cancel()
            await asyncio.gather(poller, return_exceptions=True)

    async def apply(self, fleet: Fleet) -> None:
        async with self.lock:
            await self.forget_failures()
            await self.converge(fleet)

    async def scale_to(self, model: str, count: int) -> None:
        """Converge ``model`` (and whatever else differs) to ``count`` replicas (the scaler's)."""
        async with self.lock:
            self.counts[model] = count
            if self.fleet is not None:
                await self.converge(self.fleet)

    async def scale_down(self, r: Replica, count: int) -> None:
        """Drain and retire ``r`` (the idlest, the scaler's pick), leaving its model ``count`` replicas."""
        async with self.lock:
            self.counts[r.spec.model.name] = count
            log.info("autoscale action=stop replica=%s (the idlest): %d left", r.spec.id, count)
            await self.retire(r)
            self.count("scale_down", r.spec.model.name, "ok")

    def failed(self, action: str, model: str) -> None:
        self.count(action, model, "failed")

    async def forget_failures(self) -> None:
        """A new read of the file (a save, SIGHUP) tries again what failed: refused replaces, and replicas
        left FAILED (a failed start, a crash loop that gave up), which are withdrawn to be started anew."""
        self.refused.clear()
        for r in [r for r in self.sup.replicas if r.state is ReplicaState.FAILED]:
            log.info("reconcile replica=%s was failed: withdrawn, to be started again", r.spec.id)
            await self.retire(r)

    def load(self) -> Fleet | None:
        try:
            fleet = self.watch.read()
            self.planned = self.budgets(fleet)
        except (FleetError, BudgetError) as exc:
            log.error("fleet change refused, the running fleet keeps serving: %s", exc)
            self.metrics.fleet_reloads.labels("refused").inc()
            return None
        self.metrics.fleet_reloads.labels("applied").inc()
        return fleet

    async def adopt(self, entries: Sequence[Entry]) -> None:
        """Take over verified replicas of a previous supervisor (:func:`workers.life.adopt.check_entries`):
        same id, port and instance, published READY, then watched and reconciled like the others."""
        for e in entries:
            spec = e.spec()
            await self.sup.adopt(
                Replica(spec, self.launch_for(spec), self.log_dir, slot=e.slot), e.pid, e.instance
            )
            self.count("adopt", spec.model.name, "ok")

    def entries(self) -> list[Entry]:
        """What the state file holds: every replica with a live process, those still starting (or waking)
        marked so, and those whose spawn is under way (no pid yet)."""
        out = []
        for r in self.sup.replicas:
            pid = r.process.pid
            if r.process.spawning:
                out.append(entry_for(r.spec, r.slot, 0, r.instance, "spawning"))
            elif pid is not None and r.process.alive:
                starting = r.state in (ReplicaState.STARTING, ReplicaState.WAKING)
                out.append(entry_for(r.spec, r.slot, pid, r.instance, "starting" if starting else "running"))
        return out

    def running(self) -> list[Running]:
        return [Running(r.spec, r.slot, r.state) for r in self.sup.replicas]

    async def converge(self, fleet: Fleet) -> None:
        """Passes of plan-then-act until the plan is empty (or the supervisor stops)."""
        for m in fleet.models:  # at 0 from the start, so that the first failure is an increase
            for action in ("start", "replace"):
                self.metrics.actions.labels(action, m.name, "failed")
        for _ in range(MAX_PASSES):
            if self.sup.stopping.is_set():
                return
            actions = plan(
                fleet, self.running(), self.n_devices, self.refused, self.port_free(fleet), self.retired_ids,
                self.counts,
            )  # fmt: skip
            if not actions:
                return
            self.passes += 1
            await self.execute(actions)
        log.error("fleet not converged after %d passes", MAX_PASSES)

    def port_free(self, fleet: Fleet) -> Callable[[int], bool]:
        """The ledger skips ports something else listens on, and those of replicas stopped before (a
        gateway may still hold the old replica there for a poll interval)."""
        host = fleet.defaults.host
        return lambda port: port not in self.retired_ports and not port_taken(host, port)

    async def execute(self, actions: Sequence[Action]) -> None:
        """Each device's actions one after another; devices side by side."""
        lanes: dict[tuple[str, int], list[Action]] = {}
        for a in actions:
            lanes.setdefault(self.lane(a), []).append(a)
        await asyncio.gather(*(self.run_lane(lane) for lane in lanes.values()))

    def lane(self, a: Action) -> tuple[str, int]:
        if isinstance(a, Start):
            return device_key(a.spec.device_kind, a.spec.device)
        r = self.replica(a.replica)
        return device_key(r.spec.device_kind, r.spec.device)

    async def run_lane(self, lane: list[Action]) -> None:
        for a in lane:
            if self.sup.stopping.is_set():
                return
            if not await guarded(a.kind, self.act(a), self.failed, self.model_of(a)):
                await self.fail(a)

    def model_of(self, a: Action) -> str:
        return (
            a.spec.model.name if isinstance(a, Start | Replace) else self.replica(a.replica).spec.model.name
        )

    async def act(self, a: Action) -> None:
        if isinstance(a, Start):
            await self.start(a)
        elif isinstance(a, Stop):
            await self.stop(a)
        else:
            await self.replace(a)

    async def fail(self, a: Action) -> None:
        """After an unexpected error in ``a``: the replicas it concerns, where listed, are marked FAILED
        (the next read of the file tries them again)."""
        ids = {a.spec.id} if isinstance(a, Start) else {a.replica}
        if isinstance(a, Replace):
            ids.add(a.spec.id)
        for r in [r for r in self.sup.replicas if r.spec.id in ids]:
            await guarded("fail", self.sup.fail(r), self.failed, r.spec.model.name)

    def replica(self, replica_id: str) -> Replica:
        return self.sup.find(replica_id)

    def retire_marks(self, r: Replica) -> None:
        """``r``'s id and port are not handed out again (a gateway may still hold the old one)."""
        self.retired_ids.add(r.spec.id)
        self.retired_ports.add(r.spec.port)

    async def retire(self, r: Replica) -> None:
        """Drain and stop ``r`` for good (:meth:`Supervisor.retire`)."""
        self.retire_marks(r)
        await self.sup.retire(r)

    def count(self, action: str, model: str, outcome: str) -> None:
        self.metrics.actions.labels(action, model, outcome).inc()

    def new_replica(self, spec: ReplicaSpec, slot: int) -> Replica:
        """A replica for ``spec``, with the planner's budget and floor where its model's budget is auto."""
        spec, floor = with_plan(spec, slot, self.planned)
        return Replica(spec, self.launch_for(spec), self.log_dir, floor=floor, slot=slot)

    async def bring_up(self, r: Replica) -> bool:
        """Start a replica the loop just made; on failure it stays listed FAILED (no restart storm). An
        on-demand model's replica is listed ASLEEP instead: the activator starts it when asked."""
        if r.spec.model.on_demand and r.spec.model.name not in self.counts:
            await self.sup.park(r)
            log.info("replica=%s asleep until a request wakes it (activation on_demand)", r.spec.id)
            return True
        return await self.sup.start(r)

    async def start(self, a: Start) -> None:
        s = a.spec
        log.info("reconcile action=start replica=%s port=%d device=%d reason=%s", s.id, s.port, s.device,
                 a.reason)  # fmt: skip
        ok = await self.bring_up(self.new_replica(s, a.slot))
        self.count("start", s.model.name, "ok" if ok else "failed")
        if not ok:
            log.error("reconcile action=start replica=%s failed: left failed (see its log)", s.id)

    async def stop(self, a: Stop) -> None:
        r = self.replica(a.replica)
        log.info("reconcile action=stop replica=%s port=%d reason=%s", r.spec.id, r.spec.port, a.reason)
        await self.retire(r)
        self.count("stop", r.spec.model.name, "ok")

    async def replace(self, a: Replace) -> None:
        old, new = self.replica(a.replica), a.spec
        if new.model.on_demand and old.state is ReplicaState.ASLEEP:
            await self.replace_parked(old, a)
            self.count("replace", new.model.name, "ok")
            return
        room = await self.headroom(new)
        serving = old.process.alive and old.state is ReplicaState.READY
        order = "beside" if room.fits or not serving else "stop-first"
        log.info(
            "reconcile action=replace replica=%s -> %s port %d -> %d order=%s (%s) reason=%s",
            old.spec.id, new.id, old.spec.port, new.port, order, room.describe(), a.reason,
        )  # fmt: skip
        ok = await (self.replace_beside(old, a) if order == "beside" else self.replace_stop_first(old, a))
        self.count("replace", new.model.name, "ok" if ok else "failed")
        if not ok:
            self.refused.add(Refusal(old.spec.id, fingerprint(new.model)))

    async def replace_parked(self, old: Replica, a: Replace) -> None:
        """An asleep on-demand replica is withdrawn and its replacement listed ASLEEP in its place, not
        started: nothing asked for it, and a start of an on-demand model is the activator's wake, which
        makes room through the device's ledger first."""
        log.info(
            "reconcile action=replace replica=%s -> %s port %d -> %d order=parked (asleep: the new one "
            "starts when a request wakes it) reason=%s", old.spec.id, a.spec.id, old.spec.port, a.spec.port,
            a.reason,
        )  # fmt: skip
        await self.retire(old)
        await self.sup.park(self.new_replica(a.spec, a.slot))

    async def replace_beside(self, old: Replica, a: Replace) -> bool:
        """New one ready first (the old one REPLACING, still routable), then the old one drains."""
        new = self.new_replica(a.spec, a.slot)
        if await self.sup.replace(old, new):
            self.retire_marks(old)
            log.info("reconcile replace done: %s serves in place of %s", new.spec.id, old.spec.id)
            return True
        self.retire_marks(new)
        log.error("reconcile replace of %s failed: %s did not start; %s keeps serving",
                  old.spec.id, new.spec.id, old.spec.id if old.process.alive else "nothing")  # fmt: skip
        return False

    async def replace_stop_first(self, old: Replica, a: Replace) -> bool:
        """Not enough memory for both: the old one drains and stops, then the new one starts; when it
        cannot, the old configuration is started again on the old port."""
        log.warning("reconcile replace of %s: not enough memory for both, stopping it first", old.spec.id)
        await self.retire(old)
        new = self.new_replica(a.spec, a.slot)
        if await self.bring_up(new):
            log.info("reconcile replace done: %s serves in place of %s", new.spec.id, old.spec.id)
            return True
        await self.retire(new)
        log.error("reconcile replace of %s failed: %s did not start; starting the old configuration again",
                  old.spec.id, new.spec.id)  # fmt: skip
        back = self.new_replica(old.spec, old.slot)
        restored = await self.bring_up(back)
        self.count("start", old.spec.model.name, "ok" if restored else "failed")
        return False
