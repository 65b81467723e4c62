"""Tenancy with API keys on (one real gateway, the FAKE ENGINE with stored responses, real Redis): every
model and response endpoint needs a key, a stored response belongs to the tenant whose key created it,
and the API's own description (/docs, /openapi.json) is off by default."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from gateway.auth.keys import ApiKey, KeyStore, new_secret
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import Proc, start_fake_engine

MODEL = "resp-model"
FLEET = fleet_yaml(
    [
        {
            "name": MODEL,
            "source": {"path": "/nonexistent"},
            "engine": {"responses_store": True},
            "aliases": ["rm"],
        }
    ]
)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"), "--tokens", "2")
    yield proc
    proc.stop()


@pytest.fixture
async def gateway(tmp_path: Path, redis_url: str, prefix: str, engine: Proc) -> AsyncIterator[str]:
    await register(redis_url, prefix, MODEL, engine.url, f"{MODEL}-0", instance="one")
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix, auth=True) as url:
        yield url


async def key_for(store: KeyStore, tenant: str) -> dict[str, str]:
    key_id, secret = new_secret()
    await store.create(ApiKey(key_id, tenant, (MODEL,)), secret)
    return {"authorization": f"Bearer {secret}"}


async def test_model_endpoints_and_the_api_description_need_a_key(
    gateway: str, http: httpx.AsyncClient
) -> None:
    """Defect 6: ``GET /v1/models/{model}`` answered without a key (an oracle of names, aliases and
    states), and so did /docs and /openapi.json."""
    assert (await http.get(f"{gateway}/v1/models/{MODEL}")).status_code == 401
    assert (await http.get(f"{gateway}/v1/models/rm")).status_code == 401
    assert (await http.get(f"{gateway}/v1/models/nonexistent")).status_code == 401
    assert (await http.get(f"{gateway}/openapi.json")).status_code == 404
    assert (await http.get(f"{gateway}/docs")).status_code == 404


async def test_a_stored_response_is_its_tenants_alone(
    gateway: str, http: httpx.AsyncClient, store: KeyStore
) -> None:
    """Defect 6: a stored response was readable, chainable and cancellable by any tenant with its id."""
    alice, bob = await key_for(store, "alice"), await key_for(store, "bob")
    created = await http.post(
        f"{gateway}/v1/responses", json={"model": MODEL, "input": "hi", "store": True}, headers=alice
    )
    assert created.status_code == 200, created.text
    rid = created.json()["id"]
    assert (await http.get(f"{gateway}/v1/responses/{rid}", headers=alice)).status_code == 200
    got = await http.get(f"{gateway}/v1/responses/{rid}", headers=bob)
    assert got.status_code == 404 and got.json()["error"]["code"] == "response_not_found"
    cancel = await http.post(f"{gateway}/v1/responses/{rid}/cancel", headers=bob)
    assert cancel.status_code == 404
    follow = {"model": MODEL, "input": "more", "previous_response_id": rid}
    chained = await http.post(f"{gateway}/v1/responses", json=follow, headers=bob)
    assert chained.status_code == 404 and chained.json()["error"]["code"] == "response_not_found"
    own = await http.post(f"{gateway}/v1/responses", json=follow, headers=alice)
    assert own.status_code == 200, own.text
