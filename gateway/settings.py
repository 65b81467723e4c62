"""The gateway's settings: one pydantic-settings class, read from LLMGW_* variables, that fails fast."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

Seconds = Annotated[float, Field(gt=0)]


def _default_gateway_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LLMGW_", extra="forbid", frozen=True)

    fleet_file: Path = Field(description="The fleet YAML file that declares every model.")
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "llmgw"
    gateway_id: str = Field(default_factory=_default_gateway_id)

    max_body_bytes: Annotated[int, Field(ge=1024)] = 4 * 1024 * 1024
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
    prefix_epsilon: Annotated[float, Field(ge=0)] = 0.25
    prefix_chars: Annotated[int, Field(ge=16)] = 1024
    prefix_index: bool = True
    prefix_chunk_bytes: Annotated[int, Field(ge=16)] = 512
    prefix_max_chunks: Annotated[int, Field(ge=1, le=1024)] = 64
    prefix_index_kv_tokens: Annotated[int, Field(ge=1)] = 65536
    prefix_index_timeout_s: Seconds = 0.5
    prefix_index_retry_s: Seconds = 1.0
    session_ttl_s: Seconds = 3600.0

    admission: bool = True
    lease_ttl_s: Seconds = 15.0
    admission_redis_timeout_s: Seconds = 1.0
    admission_blocking_connections: Annotated[int, Field(ge=1)] = 1024
    presence_interval_s: Seconds = 1.0
    auth: bool = False
    auth_cache_s: Seconds = 300.0
    log_level: str = "INFO"

    @field_validator("fleet_file")
    @classmethod
    def _fleet_exists(cls, path: Path) -> Path:
        if not path.is_file():
            raise ValueError(f"fleet file {path} does not exist")
        return path
