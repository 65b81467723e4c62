"""What the supervisor tells Prometheus: its own metrics, and the workers as file-based discovery."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from gateway.replica import ReplicaState
from workers.launch import ReplicaSpec

STATES = [s.value for s in ReplicaState]


class ReplicaView(Protocol):
    spec: ReplicaSpec
    state: ReplicaState
    restarts: int
    startup_s: float


class SupervisorMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.restarts = Counter(
            "llmgw_supervisor_restarts", "Replica restarts after a crash.", ["model", "replica"], registry=r
        )
        self.state = Gauge(
            "llmgw_supervisor_replica_state",
            "1 for the replica's current state.",
            ["model", "replica", "state"],
            registry=r,
        )
        self.startup = Gauge(
            "llmgw_supervisor_startup_seconds",
            "Seconds the replica took to become ready.",
            ["model", "replica"],
            registry=r,
        )
        self.budget = Gauge(
            "llmgw_supervisor_replica_budget",
            "Memory budget: GPU fraction or KV-cache GiB.",
            ["model", "replica", "kind"],
            registry=r,
        )

    def set_state(self, model: str, replica: str, state: ReplicaState) -> None:
        for s in STATES:
            self.state.labels(model, replica, s).set(1 if s == state.value else 0)

    def render(self) -> bytes:
        return generate_latest(self.registry)


async def serve_metrics(metrics: SupervisorMetrics, host: str, port: int) -> asyncio.Server:
    """A minimal HTTP endpoint on the event loop (no thread) answering every GET with the metrics."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            body = metrics.render()
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)


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
        self.metrics.set_state(model, spec.id, replica.state)
        self.metrics.startup.labels(model, spec.id).set(replica.startup_s)
        kind, value = budget_of(replica)
        self.metrics.budget.labels(model, spec.id, kind).set(value)
        new = replica.restarts - self._restarts.get(spec.id, 0)
        self.metrics.restarts.labels(model, spec.id).inc(max(0, new))  # exists at 0 from the first start
        self._restarts[spec.id] = replica.restarts
        self._update_targets(replica)

    def _update_targets(self, replica: ReplicaView) -> None:
        spec = replica.spec
        if replica.state is ReplicaState.STARTING:
            self._targets.pop(spec.id, None)
        else:
            self._targets[spec.id] = (f"{spec.host}:{spec.port}", spec.model.name, spec.id)
        if self.sd_file is not None:
            write_targets(self.sd_file, sorted(self._targets.values()))


def budget_of(replica: ReplicaView) -> tuple[str, float]:
    spec = replica.spec
    if spec.device_kind == "gpu":
        return "gpu_memory_utilization", spec.gpu_memory_utilization or 0.0
    return "kv_cache_gib", spec.model.budget.kv_cache_gib or 1.0
