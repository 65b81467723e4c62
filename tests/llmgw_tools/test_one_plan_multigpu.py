"""One plan everywhere, for a two-GPU fleet: ``llmgw-plan`` (the planner), the supervisor's start path (its
device count and ``auto`` budgets read through the FAKE nvidia-smi reporting two H200s, its launch specs),
the compose file and the Kubernetes manifests give each replica the same devices and the same budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from llmgw_contract.fleet import Fleet, parse_fleet
from llmgw_tools.deploy.common import GpuSizing
from llmgw_tools.deploy.compose import ComposeOptions, gpu_ids
from llmgw_tools.deploy.compose import plan as compose_plan
from llmgw_tools.deploy.k8s import K8sOptions, render_k8s, workload_name
from testing.fake_nvidia_smi import fake_gpu_env
from workers.cli import auto_budgets, device_count, parse_args
from workers.converge.actions import Start
from workers.converge.actions import plan as reconcile_plan
from workers.converge.loop import with_plan
from workers.planner import make_config_loader, plan_fleet
from workers.replica.launch import BUDGET_FLAG, build_launch

CONFIGS = Path(__file__).parent.parent / "workers" / "planner" / "configs"
H200_MIB = 143_771
FLEET = f"""defaults: {{device: gpu}}
models:
 - name: llama
   source: {{path: {CONFIGS / "llama-2-7b"}}}
   engine: {{max_model_len: 4096}}
   budget: {{gpu_memory_utilization: auto}}
   placement: {{devices: [0]}}
 - name: qwen2
   source: {{path: {CONFIGS / "qwen2-7b"}}}
   engine: {{max_model_len: 4096}}
   budget: {{gpu_memory_utilization: auto}}
   placement: {{devices: [1]}}
"""
TP_FLEET = f"""defaults: {{device: gpu}}
models:
 - name: gemma
   source: {{path: {CONFIGS / "gemma-7b"}}}
   engine: {{max_model_len: 4096, tensor_parallel_size: 2}}
   budget: {{gpu_memory_utilization: auto}}
"""
UNPLACED_FLEET = "".join(line for line in FLEET.splitlines(True) if "placement:" not in line)
Placed = dict[str, tuple[tuple[int, ...], str]]
"""replica id -> (its devices, its budget as passed to vLLM)."""


@pytest.fixture(autouse=True)
def two_fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in fake_gpu_env(tmp_path, count=2).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("FAKE_GPU_TOTAL_MIB", str(H200_MIB))


def planner(fleet: Fleet) -> Placed:
    plan = plan_fleet(fleet, dict.fromkeys(range(2), H200_MIB << 20), make_config_loader())
    assert plan.problems == ()
    return {f"{r.model}-{r.replica}": (r.devices, f"{r.gpu_memory_utilization:.3f}") for r in plan.replicas}


def supervisor(fleet: Fleet, fleet_path: Path) -> Placed:
    """What the supervisor starts: its device count, its reconcile plan's Start specs with the planner's
    budgets (as the reconciler applies them), and each launch's CUDA_VISIBLE_DEVICES and budget flag."""
    n = device_count(parse_args(["--fleet", str(fleet_path)]))
    budgets = auto_budgets(fleet, None)
    out: Placed = {}
    for action in reconcile_plan(fleet, [], n):
        assert isinstance(action, Start)
        spec, _ = with_plan(action.spec, action.slot, budgets)
        launch = build_launch(spec, "/w")
        devices = tuple(int(d) for d in launch.env["CUDA_VISIBLE_DEVICES"].split(","))
        out[spec.id] = (devices, launch.argv[launch.argv.index(BUDGET_FLAG) + 1])
    return out


def compose(fleet: Fleet) -> Placed:
    specs = compose_plan(fleet, ComposeOptions(sizing=GpuSizing(), gpus=2))
    return {s.id: (tuple(int(g) for g in gpu_ids(s)), f"{s.gpu_memory_utilization:.3f}") for s in specs}


def kubernetes(fleet: Fleet, text: str) -> dict[str, tuple[int, str]]:
    """model -> (GPUs the pod requests, its budget): a pod has GPUs of its own, so only their number."""
    rendered = render_k8s(fleet, text, K8sOptions(sizing=GpuSizing()))
    out = {}
    for m in fleet.models:
        docs = [d for f, t in rendered.items() if f.startswith("models/") for d in yaml.safe_load_all(t)]
        dep: dict[str, Any] = next(
            d
            for d in docs
            if d and d.get("kind") == "Deployment" and d["metadata"]["name"] == workload_name(m)
        )
        vllm = dep["spec"]["template"]["spec"]["containers"][0]
        args = [str(a) for a in vllm["args"]]
        out[m.name] = (int(vllm["resources"]["limits"]["nvidia.com/gpu"]), args[args.index(BUDGET_FLAG) + 1])
    return out


@pytest.mark.parametrize(
    "text",
    [FLEET, UNPLACED_FLEET, TP_FLEET],
    ids=["placed-one-per-gpu", "spread-one-per-gpu", "tensor-parallel-2"],
)
def test_plan_supervisor_compose_and_kubernetes_agree(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    fleet = parse_fleet(text)
    planned = planner(fleet)
    assert supervisor(fleet, path) == planned
    assert compose(fleet) == planned
    pods = kubernetes(fleet, text)
    assert {f"{m}-0": (n, b) for m, (n, b) in pods.items()} == {
        k: (len(devices), budget) for k, (devices, budget) in planned.items()
    }
    assert sorted({d for devices, _ in planned.values() for d in devices}) == [0, 1]  # both GPUs used
