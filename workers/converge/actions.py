"""Reconcile decisions (pure, no I/O): the desired fleet against the running replicas gives the actions
that converge them: start, stop (a drain, then a stop) and replace.

Rules:

* a running replica keeps its id, port and device whatever else changes in the fleet;
* each model's replicas fill *slots* ``0 .. max-1`` (``max``: its scaling rule's maximum, ``replicas``
  without a rule), ``count`` of them (``counts``: the supervisor's scaler's desired count, else
  ``replicas``): the replicas kept are the running ones of the lowest slots, a missing one starts in the
  lowest free slot; a slot's devices are the one placement's at the rules' maxima
  (:func:`workers.replica.placement.place_replicas`, slot = replica index); a replica whose launch-relevant
  configuration (:func:`fingerprint`) or placed device differs from the fleet's is replaced;
* new ports come from a ledger of the ports in use (:class:`PortLedger`): the lowest free one from the
  fleet's ``base_port``, so an untouched replica never moves and a replacement gets a new port;
* a replacement takes its old replica's slot, a new replica id (the lowest index the model does not use)
  and a new instance id (given at start);
* at most one replace per model per pass (a rolling replace); the executor runs the actions of one
  device one after another (:func:`device_key`), and re-plans after each pass until nothing is left;
* a replace already tried and failed for the same configuration (``refused``) is not tried again;
  neither is a slot whose replica is FAILED with the fleet's current configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from llmgw_contract.fleet import Fleet, Model
from llmgw_contract.registry import ReplicaState
from llmgw_contract.scaling import scaling_rule
from workers.planner.scaling import at_maximum
from workers.replica.launch import ReplicaSpec
from workers.replica.placement import place_replicas

LAUNCH_FIELDS = frozenset({"name", "aliases", "source", "engine", "budget", "concurrency"})
"""The fields of a model that reach vLLM's command line: a change to any of them needs a new process."""


def fingerprint(model: Model) -> str:
    """What a replica was started with, as far as vLLM sees it (policy or queue limits do not count)."""
    return model.model_dump_json(include=set(LAUNCH_FIELDS))


@dataclass(frozen=True, slots=True)
class Running:
    """A replica as the reconciler sees it."""

    spec: ReplicaSpec
    slot: int
    state: ReplicaState = ReplicaState.READY

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def model(self) -> str:
        return self.spec.model.name


@dataclass(frozen=True, slots=True)
class Start:
    spec: ReplicaSpec
    slot: int
    reason: str
    kind: str = "start"


@dataclass(frozen=True, slots=True)
class Stop:
    replica: str
    reason: str
    kind: str = "stop"


@dataclass(frozen=True, slots=True)
class Replace:
    replica: str
    spec: ReplicaSpec
    slot: int
    reason: str
    kind: str = "replace"


Action = Start | Stop | Replace


def device_key(device_kind: str, device: int) -> tuple[str, int]:
    """Actions with the same key run one after another: one GPU each; every CPU replica shares one key
    (vLLM's CPU starts are slow and share the host's memory)."""
    return ("gpu", device) if device_kind == "gpu" else ("cpu", 0)


def always_free(_: int) -> bool:
    return True


@dataclass(slots=True)
class PortLedger:
    """The ports in use; :meth:`allocate` hands out the lowest free one from ``base`` (skipping those
    ``is_free`` says something else holds)."""

    base: int
    used: set[int] = field(default_factory=set)
    is_free: Callable[[int], bool] = always_free

    def allocate(self) -> int:
        port = self.base
        while port in self.used or not self.is_free(port):
            port += 1
        self.used.add(port)
        return port


@dataclass(frozen=True, slots=True)
class Refusal:
    """A replace (or start) that failed: replica (or model/slot) and the configuration it failed with."""

    replica: str
    fingerprint: str


def plan(
    fleet: Fleet,
    running: Sequence[Running],
    n_devices: int,
    refused: Iterable[Refusal] = (),
    is_free: Callable[[int], bool] = always_free,
    retired: Iterable[str] = (),
    counts: Mapping[str, int] | None = None,
) -> list[Action]:
    """Every action that moves ``running`` toward ``fleet``, in fleet order (stops of removed models
        last).  ``retired``: ids of replicas stopped before, never given again (a gateway may still hold the
        old one).  ``counts``: replicas wanted per model (the scaler's; within the model's rule), else
    ``replicas``.  Pure: the same inputs give the same actions."""
    planner = _Planner(fleet, running, n_devices, frozenset(refused), is_free, frozenset(retired))
    planner.counts = counts or {}
    for model in fleet.models:
        if model.managed:
            planner.model(model)
    wanted = {m.name for m in fleet.models if m.managed}
    for r in running:
        if r.model not in wanted:
            planner.actions.append(Stop(r.id, f"model {r.model} is no longer in the fleet"))
    return planner.actions


class _Planner:
    def __init__(
        self,
        fleet: Fleet,
        running: Sequence[Running],
        n_devices: int,
        refused: frozenset[Refusal],
        is_free: Callable[[int], bool],
        retired: frozenset[str],
    ) -> None:
        self.fleet, self.running, self.refused, self.retired = fleet, running, refused, retired
        self.n_devices = max(1, n_devices)
        self.ports = PortLedger(fleet.defaults.base_port, {r.spec.port for r in running}, is_free)
        self.placement = place_replicas((at_maximum(fleet) or fleet).models, range(self.n_devices))
        self.actions: list[Action] = []
        self.counts: Mapping[str, int] = {}

    def count(self, model: Model) -> tuple[int, int]:
        """(replicas wanted, slots there are) for ``model``: the scaler's count within its rule."""
        rule = scaling_rule(model)
        wanted = self.counts.get(model.name, model.replicas)
        return max(rule.min_replicas, min(rule.max_replicas, wanted)), max(rule.max_replicas, model.replicas)

    def model(self, model: Model) -> None:
        mine = sorted((r for r in self.running if r.model == model.name), key=lambda r: (r.slot, r.id))
        indices = {r.spec.index for r in mine} | {
            int(rid.rsplit("-", 1)[1]) for rid in self.retired if rid.rsplit("-", 1)[0] == model.name
        }
        count, slots = self.count(model)
        by_slot: dict[int, Running] = {}
        for r in mine:
            if r.slot < slots and r.slot not in by_slot and len(by_slot) < count:
                by_slot[r.slot] = r
            else:
                self.actions.append(Stop(r.id, f"surplus: {model.name} wants {count} replicas"))
        free = [slot for slot in range(slots) if slot not in by_slot]
        for slot in free[: count - len(by_slot)]:
            self.start(model, slot, indices, count)
        replaced = False
        for current in by_slot.values():
            if not replaced:
                replaced = self.replace(model, current, indices)

    def spec(
        self, model: Model, slot: int, indices: set[int], devices: tuple[int, ...] | None = None
    ) -> ReplicaSpec:
        index = next(i for i in range(len(indices) + 1) if i not in indices)
        indices.add(index)
        if devices is None:
            devices = self.placement[(model.name, slot)]
        d = self.fleet.defaults
        budget = model.budget.fixed_gpu_memory_utilization
        return ReplicaSpec(model, index, self.ports.allocate(), devices, d.host, d.device, budget)

    def start(self, model: Model, slot: int, indices: set[int], count: int) -> None:
        spec = self.spec(model, slot, indices)
        self.actions.append(Start(spec, slot, f"{model.name} wants {count} replicas (slot {slot})"))

    def replace(self, model: Model, current: Running, indices: set[int]) -> bool:
        """Append a Replace when ``current`` differs from the fleet; True when it did."""
        why = self.difference(model, current)
        if why is None or Refusal(current.id, fingerprint(model)) in self.refused:
            return False
        placed = self.placement[(model.name, current.slot)] if model.placement.devices else None
        spec = self.spec(model, current.slot, indices, placed or current.spec.devices)
        self.actions.append(Replace(current.id, spec, current.slot, why))
        return True

    def difference(self, model: Model, current: Running) -> str | None:
        """Why ``current`` must be replaced to match ``model``, or None when it matches."""
        if fingerprint(current.spec.model) != fingerprint(model):
            changed = sorted(f for f in LAUNCH_FIELDS if getattr(current.spec.model, f) != getattr(model, f))
            return f"{', '.join(changed)} changed"
        if not model.placement.devices:
            return None  # unplaced replicas stay where they run
        placed = self.placement[(model.name, current.slot)]
        if current.spec.devices != placed:
            return f"placement moved slot {current.slot} to devices {','.join(map(str, placed))}"
        return None
