"""The supervisor's replica metrics name each replica's device(s): its budget series carries
``device="gpu:0,1"`` for a tensor-parallel replica on GPUs 0 and 1 (pure: the Observer and its registry)."""

from __future__ import annotations

from dataclasses import dataclass

from llmgw_contract.fleet import parse_fleet
from llmgw_contract.registry import ReplicaState
from llmgw_contract.replica_metrics import SupervisorMetrics
from workers.life.observe import Observer
from workers.replica.launch import ReplicaSpec


@dataclass
class View:
    spec: ReplicaSpec
    state: ReplicaState = ReplicaState.READY
    restarts: int = 0
    startup_s: float = 1.0
    retired: bool = False


def test_budget_series_carry_each_replicas_devices() -> None:
    models = parse_fleet(
        "models:\n - name: a\n   source: {path: /m}\n - name: b\n   source: {path: /m}\n"
    ).models
    metrics = SupervisorMetrics()
    observe = Observer(metrics, None)
    observe(View(ReplicaSpec(models[0], 0, 9000, (0, 1), device_kind="gpu", gpu_memory_utilization=0.4)))
    observe(View(ReplicaSpec(models[1], 0, 9001, (1,), device_kind="gpu", gpu_memory_utilization=0.3)))
    text = metrics.render().decode()
    a = 'device="gpu:0,1",kind="gpu_memory_utilization",model="a",replica="a-0"'
    b = 'device="gpu:1",kind="gpu_memory_utilization",model="b",replica="b-0"'
    assert f"llmgw_supervisor_replica_budget{{{a}}} 0.4" in text
    assert f"llmgw_supervisor_replica_budget{{{b}}} 0.3" in text
    observe(View(ReplicaSpec(models[1], 0, 9001, (1,), device_kind="gpu"), retired=True))
    assert 'replica="b-0"' not in metrics.render().decode()
