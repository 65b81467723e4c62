"""``llmgw-gateway`` with ``LLMGW_LOG_FORMAT=json`` (issue 45): every line it writes, uvicorn's included,
is one JSON object; the setting refuses another format at start."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fastapi import FastAPI
from pydantic import ValidationError

from gateway.cli import server_config
from gateway.settings import GatewaySettings
from testing.gateway import fleet_yaml
from testing.procs import free_port, spawn, wait_for_line


def test_json_format_hands_uvicorns_loggers_to_the_root_handler(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(fleet_yaml([{"name": "m", "source": {"path": "/m"}}]))
    json_config = server_config(
        FastAPI(), GatewaySettings(fleet_file=fleet, log_format="json"), "127.0.0.1", 1
    )
    text_config = server_config(FastAPI(), GatewaySettings(fleet_file=fleet), "127.0.0.1", 1)
    assert json_config.log_config is None and text_config.log_config is not None
    with pytest.raises(ValidationError):
        GatewaySettings(fleet_file=fleet, log_format="xml")  # type: ignore[arg-type]


def test_a_running_gateway_writes_json_lines(tmp_path: Path, redis_url: str) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(fleet_yaml([{"name": "m", "source": {"path": "/m"}}]))
    port = free_port()
    argv = [sys.executable, "-m", "gateway.cli", "--fleet", str(fleet), "--port", str(port)]
    env = {"LLMGW_LOG_FORMAT": "json", "LLMGW_REDIS_URL": redis_url, "LLMGW_LOG_LEVEL": "DEBUG"}
    proc = spawn(argv, port, tmp_path / "gateway.log", env)
    try:
        wait_for_line(proc, '"level"', 30, "the gateway's first log line")
    finally:
        proc.stop()
    lines = [line for line in proc.log.read_text().splitlines() if line.strip()]
    assert lines
    for line in lines:
        record = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(record), line
