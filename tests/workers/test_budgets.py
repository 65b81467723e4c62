"""Budgets left ``auto``: the supervisor starts each replica at the planner's budget and floor, the
renderers write the same budget, and a fleet that does not fit is refused before anything starts."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from llmgw_contract.fleet import Fleet
from llmgw_tools.deploy.common import GpuSizing
from llmgw_tools.deploy.compose import ComposeOptions, render_compose
from llmgw_tools.deploy.k8s import K8sOptions, render_k8s
from workers.cli import launcher
from workers.converge.loop import with_plan
from workers.life.owner import Replica
from workers.planner import make_config_loader
from workers.planner.budgets import BudgetError, PlannedBudgets, arithmetic, needs_plan, planned_budgets
from workers.replica.launch import BUDGET_FLAG, ReplicaSpec, plan_replicas

CONFIGS = Path(__file__).parent / "planner" / "configs"
H200 = 143_771 << 20


def fleet(budget: object = "auto", replicas: int = 2) -> Fleet:
    model = {
        "name": "llama",
        "source": {"path": str(CONFIGS / "llama-2-7b")},
        "replicas": replicas,
        "placement": {"devices": [0]},
        "engine": {"max_model_len": 4096},
        "budget": {"gpu_memory_utilization": budget},
    }
    return Fleet.model_validate({"defaults": {"device": "gpu"}, "models": [model]})


def args(tmp_path: Path) -> argparse.Namespace:
    return argparse.Namespace(models_dir=None, log_dir=tmp_path)


def replica(spec: ReplicaSpec, planned: PlannedBudgets, a: argparse.Namespace) -> Replica:
    """What the reconcile loop makes of a spec (workers.converge.loop.Reconciler.new_replica)."""
    spec, floor = with_plan(spec, spec.index, planned)
    return Replica(spec, launcher(a)(spec), a.log_dir, floor=floor)


def test_auto_replicas_start_at_the_planned_budget_and_floor(tmp_path: Path) -> None:
    f = fleet()
    planned = planned_budgets(f, {0: H200}, make_config_loader())
    assert needs_plan(f) and set(planned) == {("llama", 0), ("llama", 1)}
    plan = planned[("llama", 0)]
    assert 0.3 < plan.gpu_memory_utilization < 0.45  # two replicas share 0.85 of the card
    spec = plan_replicas(f.models, f.defaults, 1)[0]
    rep = replica(spec, planned, args(tmp_path))
    argv = rep.process.launch.argv
    assert argv[argv.index(BUDGET_FLAG) + 1] == f"{plan.gpu_memory_utilization:.3f}"
    assert rep.floor == plan.backoff_floor
    line = arithmetic(plan)
    assert "budget auto ->" in line and "weights" in line and "back-off floor" in line


def test_a_fixed_budget_is_left_alone(tmp_path: Path) -> None:
    f = fleet(budget=0.4)
    assert not needs_plan(f)
    rep = replica(plan_replicas(f.models, f.defaults, 1)[0], {}, args(tmp_path))
    argv = rep.process.launch.argv
    assert argv[argv.index(BUDGET_FLAG) + 1] == "0.400"


def test_a_fleet_that_does_not_fit_is_refused_with_the_reason() -> None:
    with pytest.raises(BudgetError, match="does not fit"):
        planned_budgets(fleet(replicas=8), {0: H200}, make_config_loader())


def test_renderers_write_the_planners_budget() -> None:
    f = fleet()
    sizing = GpuSizing(gpu_bytes=H200)
    solo = sizing.solo_budget(f.models[0])
    assert (
        solo is not None
        and solo > planned_budgets(f, {0: H200}, make_config_loader())[("llama", 0)].gpu_memory_utilization
    )
    k8s = render_k8s(f, "", K8sOptions(sizing=sizing))
    pod = next(d for d in yaml.safe_load_all(k8s["models/llama.yaml"]) if d["kind"] == "Deployment")
    args = pod["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index(BUDGET_FLAG) + 1] == f"{solo:.3f}"
    services = yaml.safe_load(render_compose(f, o=ComposeOptions(sizing=sizing))["compose.yaml"])["services"]
    shared = planned_budgets(f, {0: H200}, make_config_loader())[("llama", 1)].gpu_memory_utilization
    assert services["vllm-llama-1"]["command"][-1] == f"{shared:.3f}"


def test_a_scaled_model_is_budgeted_at_its_maximum() -> None:
    """The scaler's replicas in slots above ``replicas`` have their budget; the running one leaves room."""
    data = fleet(replicas=1).model_dump(mode="json", exclude_none=True)
    data["models"][0]["scaling"] = {"min_replicas": 1, "max_replicas": 2}
    planned = planned_budgets(Fleet.model_validate(data), {0: H200}, make_config_loader())
    assert set(planned) == {("llama", 0), ("llama", 1)}
    assert planned[("llama", 0)].gpu_memory_utilization < 0.45  # shares the card with the second one
