"""Tenancy with API keys on (one real gateway, the FAKE ENGINE with stored responses, real Redis): every
model and response endpoint needs a key, a stored response belongs to the tenant whose key created it,
and the API's own description (/docs, /openapi.json) is off by default."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from gateway.auth.keys import ApiKey, KeyStore, new_secret
from llmgw_contract.redis_keys import RedisKeys
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


async def test_a_stored_response_stays_its_tenants_after_its_record_expired(
    gateway: str, http: httpx.AsyncClient, store: KeyStore, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    """Finding 10: once the affinity record expired (``responses_ttl_s``), a ``previous_response_id``
    went to normal routing and reached the replica holding the response, for any tenant. With keys on,
    the record is the proof of ownership: without it the response is not known to anyone."""
    alice, bob = await key_for(store, "alice"), await key_for(store, "bob")
    created = await http.post(
        f"{gateway}/v1/responses", json={"model": MODEL, "input": "hi", "store": True}, headers=alice
    )
    assert created.status_code == 200, created.text
    rid = created.json()["id"]
    assert await redis.delete(keys.response(MODEL, rid)) == 1  # the record expired
    follow = {"model": MODEL, "input": "more", "previous_response_id": rid}
    for who in (bob, alice):  # the owner too: nothing proves it is hers any more
        chained = await http.post(f"{gateway}/v1/responses", json=follow, headers=who)
        assert chained.status_code == 404, chained.text
        assert chained.json()["error"]["code"] == "response_not_found"
        assert chained.json()["error"]["param"] == "previous_response_id"
        for method, path in (("GET", f"/v1/responses/{rid}"), ("POST", f"/v1/responses/{rid}/cancel")):
            r = await http.request(method, f"{gateway}{path}", headers=who)
            assert r.status_code == 404 and r.json()["error"]["code"] == "response_not_found", r.text
