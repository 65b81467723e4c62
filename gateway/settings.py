"""The gateway's settings: one pydantic-settings class, read from LLMGW_* variables, that fails fast."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

Seconds = Annotated[float, Field(gt=0)]


def _default_gateway_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LLMGW_", extra="forbid", frozen=True)

    fleet_file: Path = Field(description="The fleet YAML file that declares every model.")
    redis_url: str = "redis://127.0.0.1:6379/0"
    # API keys live in a Redis that persists (AOF); the state in redis_url is ephemeral. Unset: redis_url.
    keys_redis_url: str | None = None
    redis_prefix: str = "llmgw"
    gateway_id: str = Field(default_factory=_default_gateway_id)

    max_body_bytes: Annotated[int, Field(ge=1024)] = 4 * 1024 * 1024
    # Limits at the door, before authentication (docs/architecture/gateway.md, beside nginx's): the
    # request line and headers together (over it: 431), and the time to read them (past it: 408).
    max_head_bytes: Annotated[int, Field(ge=4096)] = 64 * 1024
    header_timeout_s: Seconds = 10.0
    # A stream whose client makes no write progress for this long is ended (its slot released).
    stream_write_timeout_s: Seconds = 30.0
    # Media URLs (images, audio, video, files) whose host is one of these domains (or under one) are
    # passed on unchecked; any other that resolves to an internal address is refused (400).
    media_domains: list[str] = []
    connect_timeout_s: Seconds = 2.0
    first_byte_timeout_s: Seconds = 120.0
    chunk_timeout_s: Seconds = 60.0
    request_timeout_s: Seconds = 600.0
    retry_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    retry_deadline_s: Seconds = 15.0
    max_connections: Annotated[int, Field(ge=1)] = 1024
    keepalive_timeout_s: Seconds = Field(
        default=75.0, description="Idle client (nginx) connections are kept this long: longer than nginx's."
    )
    shutdown_grace_s: Seconds = Field(
        default=120.0, description="On SIGTERM, open requests get this long before their planned end."
    )

    registry_poll_s: Seconds = 1.0
    health_interval_s: Seconds = 2.0
    load_scrape_interval_s: Seconds = 1.0
    load_share_interval_s: Seconds = 0.1
    load_share_max_age_s: Seconds = 2.0
    eject_base_s: Seconds = 1.0
    eject_max_s: Seconds = 30.0
    # A replica is ejected after this many server errors (5xx answers) in a row; a connection error
    # or a failed health check ejects at once.
    eject_after: Annotated[int, Field(ge=1, le=100)] = 3
    prefix_epsilon: Annotated[float, Field(ge=0)] = 0.25
    prefix_inflight_epsilon: Annotated[float, Field(ge=0)] = 1.0
    prefix_share_window: Annotated[int, Field(ge=1, le=10_000)] = 32
    prefix_chars: Annotated[int, Field(ge=16)] = 1024
    prefix_index: bool = True
    prefix_chunk_bytes: Annotated[int, Field(ge=16)] = 512
    prefix_max_chunks: Annotated[int, Field(ge=1, le=1024)] = 64
    prefix_index_kv_tokens: Annotated[int, Field(ge=1)] = 65536
    prefix_bytes_per_token: Annotated[int, Field(ge=1, le=64)] = 8
    prefix_index_timeout_s: Seconds = 0.5
    prefix_index_retry_s: Seconds = 1.0
    session_ttl_s: Seconds = 3600.0

    admission: bool = True
    lease_ttl_s: Seconds = 15.0
    admission_redis_timeout_s: Seconds = 1.0
    admission_blocking_connections: Annotated[int, Field(ge=1)] = 1024
    presence_interval_s: Seconds = 1.0
    auth: bool = False
    # Serving a non-loopback address with auth off is an open proxy: refused unless this says so.
    allow_open: bool = False
    # /docs, /redoc and /openapi.json; unset: on with API keys off, off with keys on (the description
    # names every path and schema to anyone).
    docs: bool | None = None
    # While the key store is unreachable, a key verified within this long still passes (a revoked key
    # stops working on every gateway within it, even one cut off from the key store).
    auth_cache_s: Seconds = 5.0
    # The one credential that may manage keys (/admin/*); unset: the admin endpoints are off.
    admin_key: SecretStr | None = None
    # Sent to vLLM as `Authorization: Bearer` (requests, health and metrics) when its --api-key is set.
    vllm_api_key: SecretStr | None = None
    responses_ttl_s: Seconds = 86400.0
    lora_sync_s: Seconds = 1.0
    log_level: str = "INFO"

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
