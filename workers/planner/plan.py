"""Fleet -> plan: which budget each replica gets on which device, whether it fits, and why.

:func:`plan_fleet` is what the supervisor calls and what ``llmgw-plan`` prints.  Placement is
:func:`workers.replica.placement.place_replicas`, the one the launcher uses too, so the plan's devices
are where the supervisor starts each replica.

A replica whose fleet entry sets ``budget.gpu_memory_utilization`` keeps it; the others share what the
target leaves on their device: each gets the budget its weights, in-budget other and asked KV cache
(max_model_len x concurrency tokens) need, and the rest of the target is split in proportion to those
asked KV bytes, so every planned replica on a device gets the same multiple of the context it asked for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmgw_contract.fleet import Fleet, Model
from workers.planner import memory as mem
from workers.planner.model_shape import ModelShape, Quantization, shape_from_config
from workers.planner.result import DEFAULT_TARGET, DevicePlan, ModelEstimate, Plan, ReplicaPlan
from workers.replica.launch import engine_args
from workers.replica.placement import place_replicas

# --- reading the fleet entry -----------------------------------------------------------------------------


def engine_flag(args: Sequence[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` among vLLM extra arguments (the last one wins)."""
    value = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def _weight_dtype(model: Model, shape: ModelShape) -> str:
    """The dtype vLLM computes in: the fleet's, or the checkpoint's (float32 checkpoints drop to bf16)."""
    if model.engine.dtype != "auto":
        return model.engine.dtype
    ckpt = shape.torch_dtype.lower().removeprefix("torch.")
    return "bfloat16" if ckpt in ("float32", "float") else ckpt


def _quantization(model: Model, shape: ModelShape) -> Quantization | None:
    online = engine_flag(model.engine.extra_args, "--quantization")
    if shape.quantization is None and online == "fp8":
        return Quantization("fp8 (online)", 8)
    return shape.quantization


def _kv_dtype(model: Model, weight_dtype: str) -> str:
    flag = engine_flag(model.engine.extra_args, "--kv-cache-dtype")
    return weight_dtype if flag in (None, "auto") else flag


def _max_num_seqs(model: Model) -> int | None:
    """What the launcher passes (its engine arguments, then extra_args, which win); None: vLLM's default."""
    flag = engine_flag([*engine_args(model), *model.engine.extra_args], "--max-num-seqs")
    return int(flag) if flag and flag.isdigit() else None


def estimate_model(model: Model, shape: ModelShape) -> ModelEstimate:
    """Everything about one model that does not depend on the device (raises ValueError if unusable)."""
    max_len = model.engine.max_model_len or shape.max_position_embeddings
    if max_len is None:
        raise ValueError("set engine.max_model_len: config.json has no max_position_embeddings")
    wdt = _weight_dtype(model, shape)
    act = mem.dtype_bytes(wdt)
    quant = _quantization(model, shape)
    params = mem.count_params(shape)
    kvdt = _kv_dtype(model, wdt)
    return ModelEstimate(
        name=model.name,
        shape=shape,
        params=params,
        weight_dtype=wdt,
        act_bytes=act,
        quantization=quant,
        weight_bytes=mem.weight_bytes(params, act, quant),
        kv_dtype=kvdt,
        kv_dtype_bytes=mem.dtype_bytes(kvdt),
        tp=model.engine.tensor_parallel_size,
        max_model_len=max_len,
        concurrency=model.concurrency,
        max_num_seqs=_max_num_seqs(model),
    )


# --- the plan --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Slot:
    model: Model
    est: ModelEstimate
    replica: int
    devices: tuple[int, ...]

    @property
    def fixed(self) -> float | None:
        return self.model.budget.fixed_gpu_memory_utilization


class _Planner:
    def __init__(
        self, device_bytes: Mapping[int, int], target: float, reserve: int, profile: mem.RuntimeProfile
    ) -> None:
        self.device_bytes = dict(device_bytes)
        self.target = target
        self.reserve = reserve
        self.profile = profile
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.refused: set[int] = set()

    # per replica and device ------------------------------------------------------------------------------
    def other(self, est: ModelEstimate, dev: int) -> int:
        return self.profile.in_budget_other(est.shape.vocab_size, est.seqs_on(self.device_bytes[dev]))

    def need(self, est: ModelEstimate, dev: int, tokens: int) -> float:
        total = self.device_bytes[dev]
        return mem.budget_needed(
            est.weight_bytes_per_rank, self.other(est, dev), est.kv_bytes_for(tokens), total
        )

    def min_budget(self, s: _Slot) -> float:
        return max(self.need(s.est, d, s.est.tokens_wanted) for d in s.devices)

    def start_budget(self, s: _Slot) -> float:
        return max(self.need(s.est, d, s.est.max_model_len) for d in s.devices)

    # budgets ---------------------------------------------------------------------------------------------
    def propose(self, slots: Sequence[_Slot]) -> dict[int, float]:
        """Budget per slot index: the fleet's, or the target split on each device (min over TP devices)."""
        chosen: dict[int, float] = {i: s.fixed for i, s in enumerate(slots) if s.fixed is not None}
        planned: dict[int, float] = {}
        for dev in sorted(self.device_bytes):
            for i, b in self.split_device(dev, slots).items():
                planned[i] = min(b, planned.get(i, b))
        return {**planned, **chosen}

    def split_device(self, dev: int, slots: Sequence[_Slot]) -> dict[int, float]:
        on_dev = [(i, s) for i, s in enumerate(slots) if dev in s.devices]
        free = [(i, s) for i, s in on_dev if s.fixed is None]
        if not free:
            return {}
        total = self.device_bytes[dev]
        fixed_sum = sum(s.fixed or 0.0 for _, s in on_dev)
        available = self.target - fixed_sum - len(on_dev) * self.reserve / total
        needs = [self.min_budget(s) for _, s in free]
        shares = [float(s.est.kv_bytes_for(s.est.tokens_wanted)) for _, s in free]
        budgets = mem.split_budgets(needs, shares, available)
        if budgets is None:
            self.refuse_target(dev, on_dev, needs, fixed_sum)
            budgets = needs
        return {i: b for (i, _), b in zip(free, budgets, strict=True)}

    def refuse_target(
        self, dev: int, on_dev: Sequence[tuple[int, _Slot]], needs: Sequence[float], fixed: float
    ) -> None:
        total = self.device_bytes[dev]
        reserves = len(on_dev) * self.reserve / total
        wanted = sum(needs) + fixed + reserves
        names = ", ".join(f"{s.model.name}#{s.replica}" for _, s in on_dev)
        self.problems.append(
            f"device {dev}: the target {self.target:.3f} cannot hold {names}: their asked KV caches need "
            f"budgets of at least {' + '.join(f'{n:.3f}' for n in needs)}"
            + (f" plus fixed budgets {fixed:.3f}" if fixed else "")
            + f" plus {len(on_dev)} reserves ({reserves:.3f}) = {wanted:.3f} of the card. Change: "
            + (
                f"raise --target to >= {mem.ceil_step(wanted):.3f}, "
                if wanted <= 1
                else "(more than the card) "
            )
            + "move a replica to another device, or lower max_model_len or concurrency."
        )
        self.refused.add(dev)

    # results ---------------------------------------------------------------------------------------------
    def replica_plan(self, s: _Slot, budget: float) -> ReplicaPlan:
        est = s.est
        dev = min(s.devices, key=lambda d: self.device_bytes[d])
        total = self.device_bytes[dev]
        other = self.other(est, dev)
        kv = mem.kv_cache_bytes(budget, total, est.weight_bytes_per_rank, other)
        return ReplicaPlan(
            model=est.name,
            replica=s.replica,
            devices=s.devices,
            device_bytes=total,
            gpu_memory_utilization=budget,
            budget_from="fleet" if s.fixed is not None else "planned",
            weight_bytes=est.weight_bytes_per_rank,
            other_bytes=other,
            kv_bytes=kv,
            kv_tokens=mem.kv_tokens(kv, est.kv_bytes_per_token),
            kv_tokens_wanted=est.tokens_wanted,
            reserve_bytes=self.reserve,
            min_budget=self.min_budget(s),
            start_budget=self.start_budget(s),
            floor=s.model.budget.min_gpu_memory_utilization,
        )

    def check_replica(self, r: ReplicaPlan, est: ModelEstimate) -> None:
        tag = f"model {r.model!r} replica {r.replica} (device {', '.join(map(str, r.devices))})"
        if r.kv_tokens < r.kv_tokens_wanted and r.budget_from == "fleet":
            why = "vLLM will refuse to start" if r.kv_tokens < est.max_model_len else "requests will queue"
            self.problems.append(
                f"{tag}: budget {r.gpu_memory_utilization:.3f} leaves {_gib(r.kv_bytes)} GiB of KV cache = "
                f"{r.kv_tokens:,} tokens, but max_model_len {est.max_model_len:,} x concurrency "
                f"{est.concurrency} asks {r.kv_tokens_wanted:,} ({why}). "
                f"Change: raise gpu_memory_utilization to >= {r.min_budget:.3f}, or lower max_model_len or "
                "concurrency."
            )
        if r.gpu_memory_utilization < r.floor:
            self.notes.append(
                f"{tag}: budget {r.gpu_memory_utilization:.3f} is below the fleet's "
                f"min_gpu_memory_utilization {r.floor:.3f}, so an out-of-memory start cannot back off."
            )

    def device_plan(self, dev: int, replicas: Sequence[ReplicaPlan]) -> DevicePlan:
        total = self.device_bytes[dev]
        procs = tuple((r.model, r.replica, r.gpu_memory_utilization) for r in replicas if dev in r.devices)
        used = sum(math.floor(b * total) + self.reserve for _, _, b in procs)
        return DevicePlan(dev, total, procs, used)

    def check_device(self, d: DevicePlan) -> None:
        if not d.processes or d.device in self.refused:
            return
        n = len(d.processes)
        budgets = " + ".join(f"{b:.3f}" for _, _, b in d.processes)
        if not d.fits:
            max_sum = mem.floor_step((d.total_bytes - n * self.reserve) / d.total_bytes)
            self.problems.append(
                f"device {d.device} is oversubscribed: budgets {budgets} = {d.budget_sum:.3f} x "
                f"{_gib(d.total_bytes)} GiB = {_gib(d.used_bytes - d.reserve_sum)} GiB, plus {n} reserves x "
                f"{_gib(self.reserve)} GiB = {_gib(d.used_bytes)} GiB > {_gib(d.total_bytes)} GiB (over by "
                f"{_gib(d.used_bytes - d.total_bytes)} GiB). Change: bring the budgets on device {d.device} "
                f"to a sum <= {max_sum:.3f} (e.g. scale each by {max_sum / d.budget_sum:.3f}), "
                "move a replica to another device (placement.devices), or drop gpu_memory_utilization "
                "from the fleet and let the planner split --target."
            )
        elif d.fraction > self.target + 1e-9:
            self.notes.append(
                f"device {d.device}: budgets {budgets} plus reserves fill {d.fraction:.1%} of it, above the "
                f"target {self.target:.0%}; it fits, with {_gib(d.total_bytes - d.used_bytes)} GiB to spare."
            )


def _gib(n: int) -> str:
    return f"{n / mem.GIB:.2f}"


def _estimates(
    fleet: Fleet, loader: Callable[[Model], Mapping[str, Any]], problems: list[str], notes: list[str]
) -> list[tuple[Model, ModelEstimate]]:
    out = []
    for model in fleet.models:
        if not model.managed:
            notes.append(f"model {model.name!r} is served elsewhere (endpoints): not planned.")
            continue
        if model.replicas == 0:
            continue
        try:
            out.append((model, estimate_model(model, shape_from_config(loader(model)))))
        except (OSError, ValueError) as exc:
            problems.append(f"model {model.name!r}: {exc}")
    return out


def _slots(
    models: Sequence[tuple[Model, ModelEstimate]],
    placement: Mapping[tuple[str, int], tuple[int, ...]],
    device_ids: Sequence[int],
    problems: list[str],
) -> list[_Slot]:
    slots = []
    for model, est in models:
        for r in range(model.replicas):
            devs = placement[(model.name, r)]
            unknown = sorted(set(devs) - set(device_ids))
            if not devs or unknown:
                known = ", ".join(map(str, sorted(device_ids))) or "none"
                problems.append(
                    f"model {model.name!r} replica {r}: placed on device {unknown or devs} but the known "
                    f"devices are {known}. Change placement.devices or give the device's memory."
                )
                continue
            slots.append(_Slot(model, est, r, devs))
    return slots


def plan_fleet(
    fleet: Fleet,
    device_memory_bytes: Mapping[int, int],
    config_loader: Callable[[Model], Mapping[str, Any]],
    *,
    target: float = DEFAULT_TARGET,
    reserve_bytes: int = mem.DEFAULT_RESERVE_BYTES,
    profile: mem.RuntimeProfile | None = None,
) -> Plan:
    """Plan every supervised replica of ``fleet`` onto devices of the given total memory (bytes)."""
    if not 0 < target <= 1:
        raise ValueError(f"target must be in (0, 1], got {target}")
    pl = _Planner(device_memory_bytes, target, reserve_bytes, profile or mem.RuntimeProfile())
    models = _estimates(fleet, config_loader, pl.problems, pl.notes)
    device_ids = sorted(device_memory_bytes)
    slots = _slots(models, place_replicas(fleet.models, device_ids), device_ids, pl.problems)
    budgets = pl.propose(slots)
    replicas = [pl.replica_plan(s, budgets[i]) for i, s in enumerate(slots)]
    for r, s in zip(replicas, slots, strict=True):
        pl.check_replica(r, s.est)
    devices = [pl.device_plan(d, replicas) for d in sorted(device_memory_bytes)]
    for d in devices:
        pl.check_device(d)
    return Plan(
        models=tuple(est for _, est in models),
        replicas=tuple(replicas),
        devices=tuple(devices),
        problems=tuple(pl.problems),
        notes=tuple(pl.notes),
        target=target,
        reserve_bytes=reserve_bytes,
    )


__all__ = [
    "DEFAULT_TARGET",
    "DevicePlan",
    "ModelEstimate",
    "Plan",
    "ReplicaPlan",
    "engine_flag",
    "estimate_model",
    "plan_fleet",
]
