"""A key that cannot be verified because its key store does not answer (every node frozen, SIGSTOP) gets a
clear 503 in the API's error shape with ``x-should-retry: true`` and ``retry-after``: not a 401 (the key
may be valid), not a 500. One server and Redis Cluster (whose client raises errors outside RedisError);
a real gateway (LLMGW_AUTH=true) over the test run's shared topologies."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from gateway.auth.keys import ApiKey, KeyStore, new_secret
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from testing.gateway import fleet_yaml, serve_gateway
from tests.conftest import Topologies
from tests.workers.test_registry_outage import settle

FLEET = fleet_yaml([{"name": "m", "source": {"path": "/nonexistent"}}])


@pytest.mark.parametrize("kind", ["single", "cluster"])
async def test_a_key_lookup_while_the_key_store_is_down_answers_503_in_shape(
    tmp_path: Path, redis_url: str, prefix: str, topologies: Topologies, kind: str
) -> None:
    topo = topologies.get(kind)
    store_client = connect(topo.url)
    store = KeyStore(store_client, RedisKeys(prefix))
    key_id, secret = new_secret()
    await store.create(ApiKey(key_id, "acme", ("m",)), secret)
    await store_client.aclose()
    headers = {"authorization": f"Bearer {secret}"}
    settings = {"auth": True, "keys_redis_url": topo.url, "admission_redis_timeout_s": 0.3}
    async with (
        serve_gateway(tmp_path, FLEET, redis_url, prefix, **settings) as gw,
        httpx.AsyncClient(timeout=30) as http,
    ):
        try:
            with topo.paused():
                r = await http.get(f"{gw}/v1/models", headers=headers)
        finally:
            await asyncio.to_thread(settle, topo)
        assert r.status_code == 503, r.text
        error = r.json()["error"]
        assert error["code"] == "key_store_unavailable" and error["type"] == "service_unavailable"
        assert r.headers["x-should-retry"] == "true"
        assert int(r.headers["retry-after"]) >= 1 and int(r.headers["retry-after-ms"]) > 0
        assert (await http.get(f"{gw}/v1/models", headers=headers)).status_code == 200  # back: verified
