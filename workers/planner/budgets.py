"""Budgets left ``auto`` in the fleet file: the planner's budget and back-off floor for each replica.

The supervisor calls :func:`planned_budgets` at start with the devices' real sizes (nvidia-smi);
``llmgw-render`` calls it with the sizes it is told, so rendered files carry the same arithmetic. A plan
with problems (the fleet does not fit) raises :class:`BudgetError` naming them: nothing is started.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from llmgw_contract.fleet import Fleet, Model
from workers.host.gpu import gib
from workers.planner import Plan, ReplicaPlan, plan_fleet
from workers.planner.scaling import at_maximum

ConfigLoader = Callable[[Model], Mapping[str, Any]]
PlannedBudgets = dict[tuple[str, int], ReplicaPlan]


class BudgetError(ValueError):
    """The planner cannot give the fleet's ``auto`` budgets; the message says why and what to change."""


def needs_plan(fleet: Fleet) -> bool:
    return any(m.managed and m.budget.auto for m in fleet.models)


def planned_budgets(fleet: Fleet, device_bytes: Mapping[int, int], loader: ConfigLoader) -> PlannedBudgets:
    """(model, replica index) -> the planner's replica plan, for every replica the fleet may run: each
    model at its scaling rule's maximum (:func:`workers.planner.scaling.at_maximum`), so that a replica
    the supervisor's scaler adds has its budget and the ones running leave room for it."""
    try:
        plan: Plan = plan_fleet(at_maximum(fleet) or fleet, device_bytes, loader)
    except Exception as exc:  # a missing or unreadable config.json: say which, refuse to guess
        raise BudgetError(f"cannot plan the auto budgets: {exc}") from exc
    if plan.problems:
        raise BudgetError("the fleet does not fit its devices:\n" + "\n".join(plan.problems))
    return {(r.model, r.replica): r for r in plan.replicas}


def arithmetic(r: ReplicaPlan) -> str:
    """One line: where the budget comes from (sizes in GiB)."""
    return (
        f"model={r.model} replica={r.replica} gpu:{','.join(map(str, r.devices))} budget auto -> "
        f"{r.gpu_memory_utilization:.3f} of {gib(r.device_bytes)} = weights {gib(r.weight_bytes)} + other "
        f"{gib(r.other_bytes)} + kv {gib(r.kv_bytes)} ({r.kv_tokens} tokens, {r.kv_tokens_wanted} asked); "
        f"reserve {gib(r.reserve_bytes)}; back-off floor {r.backoff_floor:.3f}"
    )
