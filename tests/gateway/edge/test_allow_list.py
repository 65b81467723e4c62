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


async def test_tokenizer_info_names_its_model_in_the_query(gw: str) -> None:
    """GET /tokenizer_info has no body: its model comes from ``?model=``; without one, a 400 naming it."""
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.get(f"{gw}/tokenizer_info", params={"model": "m"})
        assert r.status_code == 200 and r.json()["tokenizer_class"] == "FakeTokenizer", r.text
        missing = await http.get(f"{gw}/tokenizer_info")
        assert missing.status_code == 400 and missing.json()["error"]["param"] == "model", missing.text
        unknown = await http.get(f"{gw}/tokenizer_info", params={"model": "nope"})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"


async def test_per_model_base_paths(gw: str, engine: Proc) -> None:
    """lm-eval's remote tokenizer derives model-less calls from its base URL: under ``/models/{model}``
    every fixed path of the allow-list is served for that model, and nothing else is."""
    base = f"{gw}/models/m"
    async with httpx.AsyncClient(timeout=10) as http:
        info = await http.get(f"{base}/tokenizer_info")
        assert info.status_code == 200 and info.json()["tokenizer_class"] == "FakeTokenizer", info.text
        tokens = await http.post(f"{base}/tokenize", json={"prompt": "a b c", "add_special_tokens": False})
        assert tokens.status_code == 200 and tokens.json()["tokens"] == [1, 2, 3], tokens.text
        text = await http.post(f"{base}/detokenize", json={"tokens": [1, 2]})
        assert text.status_code == 200 and text.json()["prompt"] == "t1 t2", text.text
        done = await http.post(f"{base}/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 2})
        assert done.status_code == 200 and done.json()["object"] == "text_completion", done.text
        other = await http.post(f"{base}/tokenize", json={"model": "n", "prompt": "a"})
        assert other.status_code == 400 and other.json()["error"]["param"] == "model", other.text
        unknown = await http.get(f"{gw}/models/nope/tokenizer_info")
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
        before = (await http.get(f"{engine.url}/stats")).json()["served"]
        for path in ("/sleep", "/reset_prefix_cache", "/v1/responses/r1/cancel", ""):
            refused = await http.post(f"{base}{path}", json={"model": "m"})
            assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found", path
        assert (await http.get(f"{engine.url}/stats")).json()["served"] == before
