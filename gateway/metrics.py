"""The gateway's own Prometheus metrics, under the ``llmgw_`` prefix (never re-exporting ``vllm:``).

One :class:`GatewayMetrics` per app, on its own registry: no module-level state.
Buckets resolve well under 300 ms because the alert thresholds (500 ms p99) do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from llmgw_contract.build_info import apply_conventions

LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.25,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    10.0,
    20.0,
    40.0,
    80.0,
)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass
class ModelSeries:
    """One model's per-request series, looked up once (``labels()`` takes a lock and builds a key on
    every call): latency, TTFT, token counters, queue wait and depth, a stream's gaps between chunks,
    and requests by status."""

    latency: Histogram
    ttft: Histogram
    prompt_tokens: Counter
    completion_tokens: Counter
    queue_wait: Histogram
    queue_depth: Gauge | None = None  # these two made on first use: no series for a model never queued
    itl: Histogram | None = None  # in Redis, or never streamed (GatewayMetrics.depth_of, itl_of)
    by_status: dict[int, Counter] = field(default_factory=dict)


@dataclass
class TenantSeries:
    """One tenant's series for one model (API keys on), looked up once like :class:`ModelSeries`."""

    prompt_tokens: Counter
    completion_tokens: Counter
    by_status: dict[int, Counter] = field(default_factory=dict)


class GatewayMetrics:
    def __init__(self) -> None:
        self._series: dict[str, ModelSeries] = {}
        self._tenants: dict[tuple[str, str], TenantSeries] = {}
        r = self.registry = CollectorRegistry(auto_describe=True)
        apply_conventions(r)
        self.requests = Counter(
            "llmgw_requests", "Requests answered, by model and HTTP status.", ["model", "status"], registry=r
        )
        self.latency = Histogram(
            "llmgw_request_duration_seconds",
            "End-to-end latency as the client sees it.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "llmgw_time_to_first_token_seconds",
            "Time from arrival to the first upstream byte.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "llmgw_inter_token_seconds",
            "Time between streamed chunks (a stream's gaps are added when it ends, or every 64 chunks).",
            ["model"],
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter(
            "llmgw_prompt_tokens", "Prompt tokens (from usage).", ["model"], registry=r
        )
        self.completion_tokens = Counter(
            "llmgw_completion_tokens",
            "Completion tokens (from usage, else counted chunks).",
            ["model"],
            registry=r,
        )
        self.inflight = Gauge(
            "llmgw_inflight_requests",
            "Requests in flight on each replica from this gateway.",
            ["model", "replica"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "llmgw_queue_depth", "Requests waiting for admission (shared queue).", ["model"], registry=r
        )
        self.queue_wait = Histogram(
            "llmgw_queue_wait_seconds",
            "Time spent waiting for admission.",
            ["model"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.retries = Counter("llmgw_retries", "Attempts retried on another replica.", ["model"], registry=r)
        self.client_retries = Counter(
            "llmgw_client_retries",
            "Requests a client sent again (the SDKs' x-stainless-retry-count above 0).",
            ["model"],
            registry=r,
        )
        self.ejections = Counter(
            "llmgw_ejections", "Replicas ejected after failures.", ["model", "replica"], registry=r
        )
        self.rate_limited = Counter(
            "llmgw_rate_limited", "Requests refused by limits, by reason.", ["model", "reason"], registry=r
        )
        self.redis_degraded = Gauge(
            "llmgw_redis_degraded",
            "1 while Redis is unreachable and local admission is in force.",
            registry=r,
        )
        self.admission_fallbacks = Counter(
            "llmgw_admission_fallbacks",
            "Requests whose shared-queue admission failed (Redis unreachable at the acquire or during the "
            "wait): admitted by local admission instead.",
            ["model"],
            registry=r,
        )
        self.prefix_picks = Counter(
            "llmgw_prefix_index_picks",
            "Prefix-affinity picks by outcome: session, hit, moved, cold (shared index) or degraded "
            "(Redis unreachable: the rendezvous ranking).",
            ["model", "outcome"],
            registry=r,
        )
        self.prefix_index_shared = Gauge(
            "llmgw_prefix_index_shared",
            "1 while the shared prefix index in Redis is in use, 0 while degraded to the rendezvous ranking.",
            registry=r,
        )
        self.prefix_index_keys = Gauge(
            "llmgw_prefix_index_keys",
            "A model's registered replicas by the prefix index's mode in force for each: exact (its managing "
            "agent feeds the index from its vLLM KV events) or approximate (placements aged by an LRU sized "
            "from an estimate of bytes per token).",
            ["model", "mode"],
            registry=r,
        )
        self.ready_replicas = Gauge(
            "llmgw_ready_replicas", "Ready, non-ejected replicas per model.", ["model"], registry=r
        )
        self.tenant_requests = Counter(
            "llmgw_tenant_requests",
            "Requests by tenant (API keys on only), model and status.",
            ["tenant", "model", "status"],
            registry=r,
        )
        self.tenant_tokens = Counter(
            "llmgw_tenant_tokens",
            "Prompt and completion tokens by tenant (API keys on only) and model.",
            ["tenant", "model", "kind"],
            registry=r,
        )
        self.task_failures = Counter(
            "llmgw_task_failures",
            "Background steps of the lifespan that raised (logged with their traceback; the loop went on).",
            ["task"],
            registry=r,
        )
        self.idempotent = Counter(
            "llmgw_idempotent_requests",
            "Requests with an Idempotency-Key that ran no generation of their own: attached (waited for or"
            " followed the running request of their key), replayed (got its stored answer), resumed (a stream"
            " after its Last-Event-ID), refused (422: the key reused with another body); and grace_expired:"
            " keyed streams cancelled unclaimed at the end of their grace period.",
            ["outcome"],
            registry=r,
        )
        self.background = Counter(
            "llmgw_background_responses",
            "Background Responses (background: true): created (by this gateway), and run to their end here:"
            " completed, incomplete, failed (the generation failed, or the gateway stopped) or cancelled.",
            ["outcome"],
            registry=r,
        )
        self.stream_stalled = Counter(
            "llmgw_stream_stalled",
            "Streams ended because their client made no write progress for stream_write_timeout_s, or took "
            "less than stream_min_rate_bytes_s while the stream waited for it.",
            ["model"],
            registry=r,
        )
        self.stream_errors = Counter(
            "llmgw_stream_errors",
            "Streams ended by an SSE error event after they started.",
            ["model"],
            registry=r,
        )
        self.migrations = Counter(
            "llmgw_migrations",
            "Streams whose replica failed after the first byte, by model and outcome: continued (whole, on "
            "another replica), ended (the last token had come: the gateway wrote the end), failed (no "
            "replica could continue it: SSE error event), not_movable (the request cannot move: SSE error).",
            ["model", "outcome"],
            registry=r,
        )
        self.migration_stall = Histogram(
            "llmgw_migration_stall_seconds",
            "The gap a migration added to a stream: from the last event of the failed replica to the first "
            "event of the continuation.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

        self.model_state = Gauge(
            "llmgw_model_state",
            "1 for the model's state as this gateway sees it: awake, waking, asleep or unavailable.",
            ["model", "state"],
            registry=r,
        )
        self.wake_requests = Counter(
            "llmgw_wake_requests",
            "Wakes of an on-demand model this gateway asked for (the first to see demand asks).",
            ["model"],
            registry=r,
        )
        self.wake_wait = Histogram(
            "llmgw_wake_wait_seconds",
            "Time a request for an asleep on-demand model waited for it to wake.",
            ["model"],
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
            registry=r,
        )
        self.wake_timeouts = Counter(
            "llmgw_wake_timeouts",
            "Requests answered 503 because their on-demand model did not wake within wake_timeout_s.",
            ["model"],
            registry=r,
        )
        self.holds = Histogram(
            "llmgw_hold_wait_seconds",
            "Time a request for a model at zero replicas (scaling.min_replicas 0, none listed) was held in "
            "the shared queue until a replica took it.",
            ["model"],
            buckets=(0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
            registry=r,
        )
        self.hold_refused = Counter(
            "llmgw_hold_refused",
            "Requests for a model at zero answered 503 at once: their deadline was shorter than the ETA.",
            ["model"],
            registry=r,
        )
        self.hold_eta_error = Histogram(
            "llmgw_hold_eta_error_seconds",
            "How far a held request's real wait was from the ETA it was given (the measured cold start "
            "left): side late when the start took longer than told, early when shorter.",
            ["model", "side"],
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
            registry=r,
        )

    def series(self, model: str) -> ModelSeries:
        """The model's per-request series (made on first use, then reused)."""
        found = self._series.get(model)
        if found is None:
            found = self._series[model] = ModelSeries(
                self.latency.labels(model),
                self.ttft.labels(model),
                self.prompt_tokens.labels(model),
                self.completion_tokens.labels(model),
                self.queue_wait.labels(model),
            )
        return found

    def itl_of(self, model: str) -> Histogram:
        """The model's gaps between a stream's chunks (reused)."""
        series = self.series(model)
        if series.itl is None:
            series.itl = self.itl.labels(model)
        return series.itl

    def depth_of(self, model: str) -> Gauge:
        """The model's queue depth gauge (reused)."""
        series = self.series(model)
        if series.queue_depth is None:
            series.queue_depth = self.queue_depth.labels(model)
        return series.queue_depth

    def requests_of(self, model: str, status: int) -> Counter:
        """The requests counter of one model and status (reused)."""
        by_status = self.series(model).by_status
        child = by_status.get(status)
        if child is None:
            child = by_status[status] = self.requests.labels(model, str(status))
        return child

    def tenant_series(self, tenant: str, model: str) -> TenantSeries:
        """A tenant's series for a model (made on its first request, then reused: as many as the
        registry holds anyway)."""
        found = self._tenants.get((tenant, model))
        if found is None:
            tokens = self.tenant_tokens
            found = self._tenants[tenant, model] = TenantSeries(
                tokens.labels(tenant, model, "prompt"), tokens.labels(tenant, model, "completion")
            )
        return found

    def tenant_requests_of(self, tenant: str, model: str, status: int) -> Counter:
        """The tenant's requests counter of one model and status (reused)."""
        by_status = self.tenant_series(tenant, model).by_status
        child = by_status.get(status)
        if child is None:
            child = by_status[status] = self.tenant_requests.labels(tenant, model, str(status))
        return child

    def set_kv_index(self, model: str, modes: list[str]) -> None:
        """How many of the model's replicas are in each prefix-index mode."""
        for mode in ("exact", "approximate"):
            self.prefix_index_keys.labels(model, mode).set(modes.count(mode))

    def forget_replica(self, model: str, replica: str) -> None:
        """Drop a replica's series once it left the registry (pods churn: series must not pile up)."""
        self.inflight.remove(model, replica)
        self.ejections.remove(model, replica)

    def render(self) -> bytes:
        return generate_latest(self.registry)
