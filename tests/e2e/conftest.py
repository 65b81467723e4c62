"""One real stack for every end-to-end test: real Redis, real vLLM CPU replicas of the packaged
models under the supervisor, two gateway replicas, real nginx and Prometheus, on free ports. The chat
model's replicas and the gateways (tracing on) send their spans to a loopback OTLP receiver."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from bench.chaos import with_request_logs
from llmgw_tools.stack.stack import Stack, StackConfig
from testing.otlp import TraceReceiver, trace_receiver
from testing.procs import REPO, free_port


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The fleet scenarios go first (their own stack, up and down before the shared one starts); the chaos
    run goes last: it kills and freezes parts of the shared stack (and restores them)."""
    items.sort(
        key=lambda item: ("test_chaos.py" in item.nodeid) - ("test_fleet_scenarios_real" in item.nodeid)
    )


TRACED_MODEL = "smollm2-135m-instruct"


def test_fleet(tmp: Path, otlp_endpoint: str) -> Path:
    """The default fleet.yaml, moved to ports of its own so a running `make run` is left alone, with
    vLLM's request log on (the chaos test counts generations at the engine) and the chat model's
    traces sent to ``otlp_endpoint``."""
    data = with_request_logs(yaml.safe_load((REPO / "fleet.yaml").read_text()))
    data.setdefault("defaults", {})["base_port"] = 18100
    for m in data["models"]:
        if m.get("activation") == "on_demand":
            m["idle_timeout_s"] = 3600  # woken once below, then awake for the whole session
        if m["name"] == TRACED_MODEL:
            m["engine"].setdefault("extra_args", []).extend(["--otlp-traces-endpoint", otlp_endpoint])
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="session")
def otlp() -> Iterator[TraceReceiver]:
    with trace_receiver() as receiver:
        yield receiver


@pytest.fixture(scope="session")
async def stack(tmp_path_factory: pytest.TempPathFactory, otlp: TraceReceiver) -> AsyncIterator[Stack]:
    tmp = tmp_path_factory.mktemp("stack")
    config = StackConfig(
        fleet_file=test_fleet(tmp, otlp.endpoint),
        run_dir=tmp / "run",
        redis_port=free_port(),
        keys_redis_port=free_port(),
        gateway_ports=(free_port(), free_port()),
        nginx_port=free_port(),
        prometheus_port=free_port(),
        supervisor_metrics_port=free_port(),
        ready_deadline_s=900,
        drain_grace_s=10,
        # Short enough that the chaos test's frozen replica (25 s) outlasts them; far above what the
        # small requests of these tests take.
        # A stream whose replica gives no token for 2 s moves to the other replica (test_migration_live).
        gateway_env={
            "LLMGW_FIRST_BYTE_TIMEOUT_S": "20",
            "LLMGW_CHUNK_TIMEOUT_S": "10",
            "LLMGW_MIGRATION_STALL_S": "2",
            "LLMGW_TRACING": "true",
            "LLMGW_OTLP_TRACES_ENDPOINT": otlp.endpoint,
        },
    )
    s = Stack(config)
    try:
        await s.up()
        await wake_on_demand_models(s)
        yield s
    finally:
        await s.down()


async def wake_on_demand_models(s: Stack) -> None:
    """The first request to an on-demand model (Gemma) wakes it: it waits in the queue and is answered."""
    async with httpx.AsyncClient(timeout=900) as c:
        for name in s.on_demand():
            body = {"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
            r = await c.post(f"{s.config.nginx_url}/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text


@pytest.fixture(scope="session")
def base_url(stack: Stack) -> str:
    return f"{stack.config.nginx_url}/v1"
