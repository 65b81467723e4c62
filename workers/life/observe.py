"""What the supervisor tells Prometheus: its own metrics, and the workers as file-based discovery."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol

from llmgw_contract.registry import ReplicaState
from llmgw_contract.replica_metrics import SupervisorMetrics
from workers.replica.launch import ReplicaSpec


class ReplicaView(Protocol):
    spec: ReplicaSpec
    state: ReplicaState
    restarts: int
    startup_s: float
    retired: bool


def write_targets(path: Path, targets: list[tuple[str, str, str]]) -> None:
    """Prometheus file_sd: one target group per replica, labelled with model and replica; atomic."""
    groups = [
        {"targets": [hostport], "labels": {"model": model, "replica": rid}}
        for hostport, model, rid in targets
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups, indent=1))
    os.replace(tmp, path)


class Observer:
    """The supervisor's on_change hook: keeps the metrics and the discovery file in step with replicas."""

    def __init__(self, metrics: SupervisorMetrics, sd_file: Path | None) -> None:
        self.metrics, self.sd_file = metrics, sd_file
        self._restarts: dict[str, int] = {}
        self._targets: dict[str, tuple[str, str, str]] = {}

    def __call__(self, replica: ReplicaView) -> None:
        spec, model = replica.spec, replica.spec.model.name
        if replica.retired:
            self.forget(replica)
            return
        self.metrics.set_state(model, spec.id, replica.state)
        self.metrics.startup.labels(model, spec.id).set(replica.startup_s)
        kind, value = budget_of(replica)
        device = f"{spec.device_kind}:{spec.device_list}"
        self.metrics.budget.labels(model, spec.id, kind, device).set(value)
        new = replica.restarts - self._restarts.get(spec.id, 0)
        self.metrics.restarts.labels(model, spec.id).inc(max(0, new))  # exists at 0 from the first start
        self._restarts[spec.id] = replica.restarts
        self._update_targets(replica)

    def forget(self, replica: ReplicaView) -> None:
        """A retired replica: its series and its scrape target go."""
        spec = replica.spec
        self.metrics.forget(spec.model.name, spec.id)
        self._restarts.pop(spec.id, None)
        self._targets.pop(spec.id, None)
        self._write()

    def _update_targets(self, replica: ReplicaView) -> None:
        spec = replica.spec
        if replica.state in (ReplicaState.STARTING, ReplicaState.FAILED):
            self._targets.pop(spec.id, None)
        else:
            self._targets[spec.id] = (f"{spec.host}:{spec.port}", spec.model.name, spec.id)
        self._write()

    def _write(self) -> None:
        if self.sd_file is not None:
            write_targets(self.sd_file, sorted(self._targets.values()))


def budget_of(replica: ReplicaView) -> tuple[str, float]:
    spec = replica.spec
    if spec.device_kind == "gpu":
        return "gpu_memory_utilization", spec.gpu_memory_utilization or 0.0
    return "kv_cache_gib", spec.model.budget.kv_cache_gib or 1.0
