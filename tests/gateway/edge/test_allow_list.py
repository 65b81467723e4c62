"""The allow-list proven against vLLM's own route table: every path vLLM 0.32's API server can register
(read from vLLM itself, dev mode and every optional router on) either is forwarded by the gateway
(gateway/endpoints.py), is one of the gateway's own (health, metrics, the model list, its docs), or gets
404 at the gateway without the replica ever seeing it. The server-changing endpoints are named below so
that a vLLM upgrade that moved them fails here, loudly."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from gateway.endpoints import ROUTES
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import REPO, Proc, start_fake_engine

FLEET = fleet_yaml([{"name": "m", "source": {"path": "/nonexistent"}}])
GATEWAY_OWN = {
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("GET", "/v1/models"),
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("GET", "/docs/oauth2-redirect"),
    ("GET", "/redoc"),
}
SERVER_CHANGING = {
    "/sleep",
    "/wake_up",
    "/collective_rpc",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
    "/reset_prefix_cache",
    "/abort_requests",
    "/pause",
    "/resume",
    "/start_profile",
    "/stop_profile",
    "/update_weights",
    "/start_weight_update",
    "/init_weight_transfer_engine",
}


@pytest.fixture(scope="module")
def vllm_routes() -> list[tuple[str, str]]:
    out = subprocess.run(
        [sys.executable, "-m", "testing.vllm_routes"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("[")]
    return sorted({(m, path) for methods, path in rows for m in methods if m != "HEAD"})


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"))
    yield proc
    proc.stop()


@pytest.fixture
async def gw(tmp_path: Path, redis_url: str, engine: Proc) -> AsyncIterator[str]:
    prefix = f"al{uuid.uuid4().hex[:8]}"
    await register(redis_url, prefix, "m", engine.url, "m-0")
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix) as url:
        yield url


def test_vllm_route_table_has_what_the_gateway_guards(vllm_routes: list[tuple[str, str]]) -> None:
    paths = {p for _, p in vllm_routes}
    assert paths >= SERVER_CHANGING, SERVER_CHANGING - paths
    forwarded = {(r.method, r.path) for r in ROUTES}
    assert forwarded <= set(vllm_routes), forwarded - set(vllm_routes)


async def test_every_other_vllm_path_is_404_and_never_forwarded(
    gw: str, engine: Proc, vllm_routes: list[tuple[str, str]]
) -> None:
    allowed = {(r.method, r.path) for r in ROUTES} | GATEWAY_OWN
    refused = [(m, p) for m, p in vllm_routes if (m, p) not in allowed]
    assert len(refused) > 40
    async with httpx.AsyncClient(timeout=10) as http:
        before = (await http.get(f"{engine.url}/stats")).json()["served"]
        for method, path in refused:
            body = {"model": "m", "lora_name": "x", "lora_path": "/tmp", "level": 1}
            r = await http.request(method, gw + path.replace("{", "").replace("}", ""), json=body)
            assert r.status_code == 404, (method, path, r.status_code)
            assert r.json()["error"]["code"] == "not_found", (method, path, r.text)
        assert (await http.get(f"{engine.url}/stats")).json()["served"] == before
    assert {p for _, p in refused} >= SERVER_CHANGING
