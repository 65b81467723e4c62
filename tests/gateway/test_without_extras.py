"""The gateway runs on the base dependencies alone (the gateway image's): with the tracing, workers and
scaler extras' packages refused (testing/without_extras.py), ``llmgw-gateway`` starts, imports every
gateway module and serves a request from a FAKE ENGINE replica; tracing or the sidecar's KV feeds turned
on without their extra stop the start with a message that names the extra, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx

from testing.gateway import fleet_yaml, register, wait_ready
from testing.procs import REPO, free_port, running, spawn, start_fake_engine

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
WITHOUT = [sys.executable, "-m", "testing.without_extras"]
IMPORT_ALL = (
    "import importlib, pkgutil, gateway, sys; "
    "[importlib.import_module(m.name) for m in pkgutil.walk_packages(gateway.__path__, 'gateway.')]; "
    "import llmgw_contract.sidecar; "
    "assert not {'zmq', 'msgspec', 'tokenizers', 'jinja2', 'grpc', 'opentelemetry'} & set(sys.modules)"
)


def environ(**more: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("LLMGW_", "OTEL_"))} | more


def test_every_gateway_module_imports_without_the_extras(tmp_path: Path) -> None:
    script = tmp_path / "import_all.py"
    script.write_text(IMPORT_ALL)
    argv = [*WITHOUT, str(script)]
    result = subprocess.run(argv, cwd=REPO, env=environ(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


async def test_the_gateway_serves_without_the_extras(tmp_path: Path, redis_url: str) -> None:
    prefix = f"nx{uuid.uuid4().hex[:8]}"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(fleet_yaml([{"name": "m", "source": {"path": "/x"}}]))
    port = free_port()
    argv = [*WITHOUT, "gateway.cli", "--fleet", str(fleet), "--host", "127.0.0.1", "--port", str(port)]
    env = environ(LLMGW_REDIS_URL=redis_url, LLMGW_REDIS_PREFIX=prefix, LLMGW_REGISTRY_POLL_S="0.2")
    with running(start_fake_engine(tmp_path)) as engine:
        await register(redis_url, prefix, "m", engine.url, "m-0")
        with running(spawn(argv, port, tmp_path / "gateway.log", env=env)) as gw:
            async with httpx.AsyncClient(timeout=10) as c:
                await wait_ready(c, gw.url)
                r = await c.post(f"{gw.url}/v1/chat/completions", json=CHAT)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]


def test_tracing_on_without_its_extra_stops_the_start_naming_it(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(fleet_yaml([{"name": "m", "source": {"path": "/x"}}]))
    argv = [*WITHOUT, "gateway.cli", "--fleet", str(fleet), "--host", "127.0.0.1", "--port", "1"]
    env = environ(LLMGW_TRACING="true")
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "optional extra 'tracing'" in result.stderr and "[tracing]" in result.stderr
    assert "Traceback" not in result.stderr


def test_kv_events_without_the_workers_extra_stops_the_sidecar_naming_it() -> None:
    record = '{"id":"m-0","model":"m","url":"http://127.0.0.1:1","concurrency":1}'
    argv = [*WITHOUT, "llmgw_contract.sidecar", "--record", record, "--kv-events", "m-0=tcp://x:1,tcp://x:2"]
    result = subprocess.run(argv, cwd=REPO, env=environ(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "optional extra 'workers'" in result.stderr and "Traceback" not in result.stderr
