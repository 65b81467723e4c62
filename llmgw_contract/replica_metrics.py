"""The replica metrics that whoever manages a vLLM server exports (the supervisor, the registration
sidecar): state, start-up time, restarts and budget, served on a small HTTP endpoint of the event loop."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from llmgw_contract.build_info import apply_conventions
from llmgw_contract.registry import ReplicaState

STATES = [s.value for s in ReplicaState]


class SupervisorMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        apply_conventions(r)
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
            "Memory budget: GPU fraction or KV-cache GiB; device names the replica's GPUs or CPU cores "
            "(gpu:0,1 for a tensor-parallel replica on GPUs 0 and 1).",
            ["model", "replica", "kind", "device"],
            registry=r,
        )

        self.actions = Counter(
            "llmgw_supervisor_actions",
            "Reconcile actions (start, stop, replace, restart) by outcome (ok, failed, gave_up).",
            ["action", "model", "outcome"],
            registry=r,
        )
        self.fleet_reloads = Counter(
            "llmgw_supervisor_fleet_reloads",
            "Fleet file reads: applied, or refused as invalid (the running fleet keeps serving).",
            ["outcome"],
            registry=r,
        )
        self.republished = Counter(
            "llmgw_supervisor_registry_republished",
            "Times every replica was republished at once because Redis came back as a new server.",
            registry=r,
        )

        self.wakes = Counter(
            "llmgw_supervisor_wakes",
            "Wakes of on-demand models by outcome (ok, failed: did not start, or no room).",
            ["model", "outcome"],
            registry=r,
        )
        self.sleeps = Counter(
            "llmgw_supervisor_sleeps",
            "Replicas put to sleep, by reason (idle, room: to let another model wake, scale_down: the "
            "scaler removed it where sleep exists; stopped after one more scale_down_delay_s).",
            ["model", "reason"],
            registry=r,
        )
        self.autopilot_moves = Counter(
            "llmgw_supervisor_autopilot_moves",
            "Moves the residency autopilot began, by move (wake, start, sleep1, sleep2, stop) and reason "
            "(waiting, room, idle, headroom, ahead, promote).",
            ["model", "move", "reason"],
            registry=r,
        )
        self.wake_seconds = Histogram(
            "llmgw_supervisor_wake_seconds",
            "From the wake request to READY (making room, start-up and the first token included).",
            ["model"],
            buckets=(0.25, 0.5, 1, 2, 3.5, 5, 10, 20, 30, 60, 120, 300),
            registry=r,
        )
        self.resident = Gauge(
            "llmgw_supervisor_resident_bytes",
            "Resident memory of an on-demand replica's processes when it woke: what the ledger counts.",
            ["model", "replica"],
            registry=r,
        )

        self.kv_exact = Gauge(
            "llmgw_supervisor_kv_index_exact",
            "1 while the replica's KV events reach the shared prefix index (exact mode), else 0.",
            ["model", "replica"],
            registry=r,
        )
        self.kv_blocks = Gauge(
            "llmgw_supervisor_kv_blocks",
            "KV-cache blocks a replica holds as its events tell (exact mode), and the index keys they give.",
            ["model", "replica", "kind"],
            registry=r,
        )
        self.kv_resets = Counter(
            "llmgw_supervisor_kv_index_resets",
            "Resets of a replica's prefix-index entries (feed start, sequence gap, disconnect, clear).",
            ["model", "replica"],
            registry=r,
        )
        self.kv_silences = Counter(
            "llmgw_supervisor_kv_events_silences",
            "Times a replica's KV-event stream went silent while connected (its replay endpoint unanswered: "
            "process frozen, socket cut off, publisher stuck): entries reset, approximate until it answers.",
            ["model", "replica"],
            registry=r,
        )
        self.replicas_desired = Gauge(
            "llmgw_supervisor_replicas_desired",
            "Replicas the model's scaling rule and demand ask for (the supervisor as the scaler).",
            ["model"],
            registry=r,
        )
        self.replicas_actual = Gauge(
            "llmgw_supervisor_replicas_actual",
            "Replicas of the model the supervisor runs now (listed: starting, ready, asleep, draining).",
            ["model"],
            registry=r,
        )
        self.scale_refused = Counter(
            "llmgw_supervisor_scale_refused",
            "Times the demand asked for one more replica of the model and it did not fit the host's memory.",
            ["model"],
            registry=r,
        )
        self.cold_starts = Histogram(
            "llmgw_supervisor_cold_start_seconds",
            "Cold starts: from the scaler's start of a model at zero replicas to its first one READY.",
            ["model"],
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
            registry=r,
        )

    def forget(self, model: str, replica: str) -> None:
        """Drop a retired replica's series (its id will not come back)."""
        series: list[Gauge | Counter] = [self.state, self.budget, self.startup, self.restarts, self.kv_exact]
        series += [self.kv_blocks, self.kv_resets, self.kv_silences]
        for metric in series:
            for labels in [k for k in metric._metrics if k[:2] == (model, replica)]:
                metric.remove(*labels)

    def show_on_demand(self, model: str) -> None:
        """Create an on-demand model's wake and sleep series at zero, so that dashboards and alerts see
        the model before its first wake, sleep or failure."""
        for outcome in ("ok", "failed"):
            self.wakes.labels(model, outcome)
        for reason in ("idle", "room"):
            self.sleeps.labels(model, reason)

    def failed(self, action: str, subject: str) -> None:
        """Count a failed action or a dead task (:data:`llmgw_contract.supervision.Failed`) as
        ``llmgw_supervisor_actions_total{outcome="failed"}``."""
        self.actions.labels(action, subject, "failed").inc()

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
