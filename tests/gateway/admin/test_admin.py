"""Secure by default, through a real gateway: only the admin key manages keys (/admin/keys), /v1/models
needs a key when keys are on, and vLLM's API key (the FAKE ENGINE started with --api-key) is sent on
every request to the replica and on the gateway's health and metrics scrapes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from gateway.settings import GatewaySettings
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import Proc, start_fake_engine

FLEET = fleet_yaml([{"name": "m", "source": {"path": "/nonexistent"}, "policy": "round_robin"}])
ADMIN = "admin-" + "x" * 32
VLLM_KEY = "vllm-" + "y" * 32
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"), "--model", "m", "--api-key", VLLM_KEY)
    yield proc
    proc.stop()


@pytest.fixture
async def gateway(tmp_path: Path, redis_url: str, prefix: str, engine: Proc) -> AsyncIterator[str]:
    await register(redis_url, prefix, "m", engine.url, "m-0")
    async with serve_gateway(
        tmp_path, FLEET, redis_url, prefix, auth=True, admin_key=ADMIN, vllm_api_key=VLLM_KEY
    ) as url:
        yield url


def bearer(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"}


def code(r: httpx.Response) -> Any:
    return r.json()["error"]["code"]


async def test_only_the_admin_key_manages_keys(gateway: str, http: httpx.AsyncClient) -> None:
    keys = f"{gateway}/admin/keys"
    assert (await http.get(keys)).status_code == 401
    r = await http.post(keys, json={"tenant": "acme"}, headers=bearer("not-the-admin-key"))
    assert r.status_code == 401 and code(r) == "invalid_api_key"
    r = await http.post(keys, json={"tenant": "acme", "models": ["m"], "rpm": 5}, headers=bearer(ADMIN))
    assert r.status_code == 201
    created = r.json()
    secret = created.pop("secret")
    # An API key is not the admin key: it may call models, never manage keys.
    assert (await http.post(keys, json={"tenant": "evil"}, headers=bearer(secret))).status_code == 401
    assert (
        await http.post(f"{gateway}/v1/chat/completions", json=BODY, headers=bearer(secret))
    ).status_code == 200
    listed = (await http.get(keys, headers=bearer(ADMIN))).json()["data"]
    assert listed == [created] and secret not in str(listed)
    r = await http.delete(f"{keys}/{created['key_id']}", headers=bearer(ADMIN))
    assert r.status_code == 200
    r = await http.post(f"{gateway}/v1/chat/completions", json=BODY, headers=bearer(secret))
    assert r.status_code == 401
    r = await http.delete(f"{keys}/{created['key_id']}", headers=bearer(ADMIN))
    assert r.status_code == 404 and code(r) == "not_found"


async def test_admin_rejects_an_invalid_key_spec(gateway: str, http: httpx.AsyncClient) -> None:
    for body in ({"tenant": ""}, {"tenant": "a", "rpm": -1}, {"tenant": "a", "unknown": 1}):
        r = await http.post(f"{gateway}/admin/keys", json=body, headers=bearer(ADMIN))
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", body


async def test_admin_endpoints_off_without_an_admin_key(
    tmp_path: Path, redis_url: str, prefix: str, engine: Proc, http: httpx.AsyncClient
) -> None:
    await register(redis_url, prefix, "m", engine.url, "m-0")
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix, auth=True) as url:
        r = await http.get(f"{url}/admin/keys", headers=bearer(ADMIN))
        assert r.status_code == 403 and code(r) == "admin_disabled"


def test_a_short_admin_key_is_refused(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    with pytest.raises(ValidationError, match="at least 16"):
        GatewaySettings(fleet_file=fleet, admin_key="short")
    assert GatewaySettings(fleet_file=fleet, admin_key="").admin_key is None


async def test_model_list_needs_a_key_when_keys_are_on(gateway: str, http: httpx.AsyncClient) -> None:
    r = await http.get(f"{gateway}/v1/models")
    assert r.status_code == 401 and code(r) == "invalid_api_key"
    r = await http.post(f"{gateway}/admin/keys", json={"tenant": "acme"}, headers=bearer(ADMIN))
    r = await http.get(f"{gateway}/v1/models", headers=bearer(r.json()["secret"]))
    assert r.status_code == 200 and [m["id"] for m in r.json()["data"]] == ["m"]


async def test_vllm_api_key_is_sent_upstream(gateway: str, engine: Proc, http: httpx.AsyncClient) -> None:
    assert (await http.post(f"{engine.url}/v1/chat/completions", json=BODY)).status_code == 401
    r = await http.post(f"{gateway}/admin/keys", json={"tenant": "acme"}, headers=bearer(ADMIN))
    client_secret = r.json()["secret"]
    r = await http.post(f"{gateway}/v1/chat/completions", json=BODY, headers=bearer(client_secret))
    assert r.status_code == 200, r.text
    stats = (await http.get(f"{engine.url}/stats")).json()
    # vLLM's key replaces the client's: the client's own secret never reaches the replica.
    assert stats["last_headers"]["authorization"] == f"Bearer {VLLM_KEY}"
    assert client_secret not in str(stats["last_headers"])
    # The health checks and metrics scrapes (every 0.2 s here) carry it too.
    assert stats["get_authorization"] == f"Bearer {VLLM_KEY}"
