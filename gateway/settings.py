"""The gateway's settings: one pydantic-settings class, read from LLMGW_* variables, that fails fast."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

Seconds = Annotated[float, Field(gt=0)]


def _default_gateway_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="LLMGW_", extra="forbid", frozen=True, use_attribute_docstrings=True
    )

    fleet_file: Path = Field(description="The fleet YAML file that declares every model.")
    redis_url: str = "redis://127.0.0.1:6379/0"
    """The state Redis: replica registry, admission queue, leases, in-flight counts, rate counters, prefix
    index (never persisted)."""
    keys_redis_url: str | None = None
    """The key store: the Redis that holds the API keys and persists them (AOF); unset: `redis_url`."""
    redis_prefix: str = "llmgw"
    """The prefix of every Redis key name."""
    gateway_id: str = Field(default_factory=_default_gateway_id)
    """This gateway's name in Redis (in-flight share, wake requests); default: host name and pid. Admission
    tickets, leases and presence name the process, `<gateway id>/<boot nonce>`: a restart is a new one."""

    max_body_bytes: Annotated[int, Field(ge=1024)] = 4 * 1024 * 1024
    """Request body cap; larger bodies get 413."""
    max_head_bytes: Annotated[int, Field(ge=4096)] = 64 * 1024
    """Limit at the door, before authentication (beside nginx's): the request line and headers together;
    over it: 431."""
    header_timeout_s: Seconds = 10.0
    """Limit at the door: the time to read the request line and headers; past it: 408."""
    body_timeout_s: Seconds = 10.0
    """Limit after authentication (the key is checked from the head, before any body is read): the request
    body must arrive within this plus its size at `body_min_rate_bytes_s`; late: 408 (retry is safe)."""
    body_min_rate_bytes_s: Annotated[int, Field(ge=1)] = 32768
    """The slowest upload accepted past `body_timeout_s`: each byte received adds 1/this seconds to the
    body's deadline."""
    stream_write_timeout_s: Seconds = 30.0
    """A stream whose client makes no write progress for this long is dropped: its upstream closed, its slot
    released, counted in `llmgw_stream_stalled_total`. Also the window of `stream_min_rate_bytes_s`."""
    send_timeout_s: Seconds = 60.0
    """Limit on any connection (nginx's `send_timeout`): a client that takes nothing of what the gateway has
    written for this long is disconnected, so an answer or a head that nobody reads (a non-streamed answer,
    pipelined requests behind it) holds no connection, and no stream slot, for ever. Streams are judged
    sooner by `stream_write_timeout_s`."""
    stream_min_rate_bytes_s: Annotated[int, Field(ge=0)] = 4096
    """The slowest client a stream waits for: over a `stream_write_timeout_s` window in which the gateway
    waited for the client at least half the time, the client must take this many bytes a second, or it
    is dropped as above (0: only the no-progress limit)."""
    media_domains: list[str] = []
    """Media URLs (images, audio, video, files) whose host is one of these domains (or under one) are passed
    on unchecked; any other that resolves to an internal address is refused (400)."""
    connect_timeout_s: Seconds = 2.0
    """Upstream connect timeout."""
    first_byte_timeout_s: Seconds = 120.0
    """A stream's first chunk must arrive within this; past it: 504 `upstream_timeout`, not retried."""
    chunk_timeout_s: Seconds = 60.0
    """Longest gap between a stream's chunks; past it the stream ends with an SSE error event."""
    request_timeout_s: Seconds = 600.0
    """Total deadline of a non-streamed request (vLLM answers only when generation ends); past it: 504, the
    replica is not ejected and nothing is retried."""
    retry_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    """Attempts on other replicas while no replica may be running the request."""
    retry_deadline_s: Seconds = 15.0
    """Failover deadline, checked before every attempt."""
    migration_stall_s: Seconds = 5.0
    """The least wait for a token before a migrating stream may move to another replica: it moves only once
    its replica's own signals show no progress for as long (its `/metrics` counters still, or a failed
    probe) (docs/gateway/migration.md; with nowhere to move, ``chunk_timeout_s`` stands)."""
    migration_stall_gap_factor: Annotated[float, Field(ge=1)] = 4.0
    """The stall bound learned from the replica: this many times the p99 of its recent gaps between tokens,
    never under ``migration_stall_s``."""
    migration_watch_s: Seconds = 0.5
    """How often a migrating stream's watchdog checks the read that waits for its replica (still
    registered, not stalled)."""
    max_connections: Annotated[int, Field(ge=1)] = 1024
    """Upstream connections the gateway keeps open (all replicas together)."""
    upstream_idle_s: Seconds = 4.0
    """An idle upstream connection is reused only within this of its last answer, then closed: keep it
    below the replicas' own keep-alive timeout (vLLM serves with uvicorn: 5 s), so that a reused
    connection is not closed by the replica as a request is written (such a request is never sent again:
    the client would get a 502)."""
    keepalive_timeout_s: Seconds = Field(
        default=75.0,
        description="Idle client (nginx) connections are kept this long: longer than nginx's upstream "
        "keepalive_timeout (60 s), so nginx never reuses a connection the gateway is closing.",
    )
    shutdown_grace_s: Seconds = Field(
        default=120.0,
        description="On SIGTERM, open requests get this long to end; then a stream ends with an SSE error "
        "event (gateway_shutting_down) and data: [DONE], a non-streamed request gets 503 with Retry-After. "
        "uvicorn's graceful period is this + 10 s; the pod's terminationGracePeriodSeconds (150) and "
        "compose's stop_grace_period (140 s) cover it.",
    )

    registry_poll_s: Seconds = 1.0
    """How often the replica registry and the fleet file are read."""
    health_interval_s: Seconds = 2.0
    """How often every replica's `/health` is checked."""
    health_timeout_s: Seconds = 2.0
    """How long a `/health` probe or a `/metrics` scrape may take; a slower answer is a failed probe."""
    lost_after_probes: Annotated[int, Field(ge=1, le=100)] = 3
    """A failed probe takes a replica out of new picks only; after this many in a row the requests in
    flight there are moved or ended too (it is taken for lost)."""
    load_scrape_interval_s: Seconds = 1.0
    """How often vLLM's load gauges are scraped from each replica's `/metrics`."""
    load_share_interval_s: Seconds = 0.1
    """How often this gateway's in-flight counts are shared with the others through Redis."""
    load_share_max_age_s: Seconds = 2.0
    """Another gateway's shared counts older than this are dropped (a crashed gateway)."""
    eject_base_s: Seconds = 1.0
    """First back-off of an ejected replica; it doubles on each failure."""
    eject_max_s: Seconds = 30.0
    """Longest back-off of an ejected replica."""
    eject_after: Annotated[int, Field(ge=1, le=100)] = 3
    """A replica is ejected after this many server errors (5xx answers) in a row; a connection error or a
    failed health check ejects at once (out of new picks; the requests in flight there go on)."""
    prefix_epsilon: Annotated[float, Field(ge=0)] = 0.25
    """Prefix affinity's balance bound ε (a model's `epsilon` overrides it): with the index, on each replica's
    share of recent picks; without, on in-flight load."""
    prefix_inflight_epsilon: Annotated[float, Field(ge=0)] = 1.0
    """With the index: the looser in-flight bound (a burst guard)."""
    prefix_share_window: Annotated[int, Field(ge=1, le=10_000)] = 32
    """How many of the model's last picks the share bound counts, per candidate replica (at most 256
    in all)."""
    prefix_chars: Annotated[int, Field(ge=16)] = 1024
    """Without the index: the prompt characters the rendezvous ranking's prefix key reads."""
    prefix_index: bool = True
    """Prefix affinity uses the shared prefix index in Redis (false: the rendezvous ranking alone)."""
    prefix_chunk_bytes: Annotated[int, Field(ge=16)] = 512
    """The prefix chain's chunk size (512 bytes ≈ 128 tokens)."""
    prefix_max_chunks: Annotated[int, Field(ge=1, le=1024)] = 64
    """How many chunks of a prompt are indexed."""
    prefix_index_kv_tokens: Annotated[int, Field(ge=1)] = 65536
    """A replica's KV cache in tokens when it does not report `vllm:cache_config_info`."""
    prefix_bytes_per_token: Annotated[int, Field(ge=1, le=64)] = 8
    """Bytes of prompt text the index counts per KV-cache token when it sizes a replica's LRU bound."""
    prefix_index_timeout_s: Seconds = 0.5
    """The prefix index's Redis timeout."""
    prefix_index_retry_s: Seconds = 1.0
    """After an index failure, degraded mode for this long before the next try."""
    session_ttl_s: Seconds = 3600.0
    """How long the index remembers a session's last replica."""

    admission: bool = True
    """The shared Redis admission queue (false: no admission control)."""
    degraded_ready: bool = True
    """/ready stays 200 while Redis is unreachable (local admission serves); false: 503 then."""
    wake_unregistered_s: Seconds = 5.0
    """A request for an on-demand model of which the registry holds no record at all (no supervisor lists
    it, not even asleep) waits this long for one, then gets 503 `model_unavailable` with Retry-After,
    instead of waiting the model's whole `wake_timeout_s` for a wake nobody will do. Not for a model whose
    `scaling.min_replicas` is 0: no record means it is at zero, and its requests are held for a start."""
    hold_comment_s: Seconds = 5.0
    """A streamed request held for a model at zero replicas gets an SSE comment (`: waiting for <model>,
    eta <s> s`) this often while it waits, so proxies and clients do not time the stream out."""
    lease_ttl_s: Seconds = 15.0
    """TTL of an admission lease, renewed while the request runs; a crashed gateway's slots come back within
    it."""
    admission_redis_timeout_s: Seconds = 1.0
    """Timeout of every admission and key-store Redis call."""
    admission_blocking_connections: Annotated[int, Field(ge=1)] = 1024
    """Redis connections for waiters' blocking reads."""
    presence_interval_s: Seconds = 1.0
    """How often the gateway announces itself (local admission divides capacity by the gateways seen)."""
    auth: bool = False
    """API keys required on every model call."""
    allow_open: bool = False
    """Serving a non-loopback address with API keys off is an open proxy: refused unless this is true."""
    docs: bool | None = None
    """`/docs`, `/redoc` and `/openapi.json`; unset: on with API keys off, off with keys on (the description
    names every path and schema to anyone)."""
    auth_cache_s: Seconds = 5.0
    """A verified key is served from the gateway's cache this long with no key-store round trip (while the
    gateway is subscribed to the store's change channel, which drops the cache at once on every revoke);
    while the key store is unreachable, a key verified within this long still passes, later: 503
    `key_store_unavailable` with Retry-After (a revoked key stops working on a gateway cut off from the
    store within it)."""
    admin_key: SecretStr | None = None
    """The one credential that may manage keys and adapters (`/admin/*`, 16 characters or more); unset: the
    admin endpoints answer 403 `admin_disabled`."""
    vllm_api_key: SecretStr | None = None
    """Sent to vLLM as `Authorization: Bearer` (requests, health and metrics scrapes), for replicas started
    with `--api-key` (`VLLM_API_KEY`)."""
    responses_ttl_s: Seconds = 86400.0
    """How long the gateways remember which replica holds a stored Responses-API response."""
    idempotency_ttl_s: Seconds = 86400.0
    """How long a request's ``Idempotency-Key`` (per tenant) and its answer are kept: the same key and body
    within it gets the stored answer again (or waits for the running one), never a second generation."""
    idempotency_max_events: Annotated[int, Field(gt=0)] = 100000
    """The most events of one keyed stream kept in Redis for its client to resume from (MAXLEN)."""
    lora_sync_s: Seconds = 1.0
    """How often runtime LoRA adapters are read from Redis."""
    log_level: str = "INFO"
    """Python logging level."""
    log_format: Literal["text", "json"] = "text"
    """``json``: one JSON object per log line, with the request id and trace id as fields (for log
    collectors); the workers' processes read the same LLMGW_LOG_FORMAT."""
    tracing: bool = False
    """Emit OpenTelemetry spans (authenticate, queue_wait, wake, pick, forward, retry) over OTLP/gRPC; off,
    the trace context is still passed to the replicas. Needs the ``tracing`` extra (refused at start
    without it)."""
    otlp_traces_endpoint: str = "http://127.0.0.1:4317"
    """Where the spans go with tracing on (OTLP/gRPC). The standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
    OTEL_EXPORTER_OTLP_ENDPOINT wins where set (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and the SDK's
    other OTEL_* variables are honoured too; OTEL_SDK_DISABLED=true keeps tracing off)."""

    @property
    def key_store_url(self) -> str:
        """The Redis that stores the API keys."""
        return self.keys_redis_url or self.redis_url

    @field_validator("admin_key", "vllm_api_key")
    @classmethod
    def _secret(cls, value: SecretStr | None) -> SecretStr | None:
        """An empty secret is no secret; one shorter than 16 characters is refused (guessable)."""
        if value is None or not value.get_secret_value():
            return None
        if len(value.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters (e.g. `openssl rand -hex 32`)")
        return value

    @field_validator("fleet_file")
    @classmethod
    def _fleet_exists(cls, path: Path) -> Path:
        if not path.is_file():
            raise ValueError(f"fleet file {path} does not exist")
        return path
