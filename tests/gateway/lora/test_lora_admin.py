"""Runtime LoRA adapters through the admin API of real gateways, in front of two FAKE ENGINE replicas
(one refuses adapters, as a replica without room would): guarded by LLMGW_ADMIN_KEY, loaded across the
model's replicas, learned by the other gateway without a restart, routed only to the replica that
loaded it, and gone everywhere once unloaded."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import openai
import pytest

from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import Proc, start_fake_engine

ADMIN = "admin-secret-for-tests"
FLEET = fleet_yaml(
    [
        {
            "name": "base",
            "source": {"path": "/nonexistent"},
            "policy": "round_robin",
            "engine": {"runtime_lora": True},
        },
        {"name": "fixed", "source": {"path": "/nonexistent"}},
        {"name": "refuser", "source": {"path": "/nonexistent"}, "engine": {"runtime_lora": True}},
    ]
)


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Proc]]:
    tmp = tmp_path_factory.mktemp("fake")
    procs = [start_fake_engine(tmp, "--tokens", "2"), start_fake_engine(tmp, "--tokens", "2", "--no-lora")]
    yield procs
    for p in procs:
        p.stop()


@pytest.fixture
async def gateways(tmp_path: Path, redis_url: str, engines: list[Proc]) -> AsyncIterator[list[str]]:
    prefix = f"lo{uuid.uuid4().hex[:8]}"
    for i, e in enumerate(engines):
        await register(redis_url, prefix, "base", e.url, f"base-{i}")
    await register(redis_url, prefix, "fixed", engines[0].url, "fixed-0")
    await register(redis_url, prefix, "refuser", engines[1].url, "refuser-0")
    async with (
        serve_gateway(tmp_path, FLEET, redis_url, prefix, admin_key=ADMIN, lora_sync_s=0.1) as g1,
        serve_gateway(tmp_path, FLEET, redis_url, prefix, admin_key=ADMIN, lora_sync_s=0.1) as g2,
        serve_gateway(tmp_path, FLEET, redis_url, prefix) as no_admin,
    ):
        yield [g1, g2, no_admin]


BEARER = {"authorization": f"Bearer {ADMIN}"}
ADAPTER = {"model": "base", "name": "base-sql", "path": "/adapters/sql"}


async def model_ids(http: httpx.AsyncClient, url: str) -> set[str]:
    return {m["id"] for m in (await http.get(f"{url}/v1/models")).json()["data"]}


async def wait_for(
    http: httpx.AsyncClient, url: str, name: str, present: bool, deadline_s: float = 10.0
) -> None:
    """Poll the gateway's model list (without blocking its loop, which is this test's) for ``name``."""

    async def listed() -> bool:
        return (name in await model_ids(http, url)) == present

    await until(listed, deadline_s, f"{url}: {name} {'listed' if present else 'gone'}")


async def served(http: httpx.AsyncClient, engine: Proc) -> int:
    count: int = (await http.get(f"{engine.url}/stats")).json()["served"]
    return count


async def test_admin_api_is_guarded(gateways: list[str], http: httpx.AsyncClient) -> None:
    g1, _, no_admin = gateways
    r = await http.post(f"{no_admin}/admin/lora", json=ADAPTER, headers=BEARER)
    assert r.status_code == 403 and r.json()["error"]["code"] == "admin_disabled"
    for headers in ({}, {"authorization": "Bearer wrong"}):
        r = await http.post(f"{g1}/admin/lora", json=ADAPTER, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    cases = [
        ({**ADAPTER, "model": "nope"}, 404),
        ({**ADAPTER, "model": "fixed"}, 400),
        ({**ADAPTER, "name": "fixed"}, 409),
        ({"model": "base"}, 400),
    ]
    for body, status in cases:
        r = await http.post(f"{g1}/admin/lora", json=body, headers=BEARER)
        assert r.status_code == status, (body, r.text)
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}


async def test_load_route_and_unload_across_gateways(
    gateways: list[str], engines: list[Proc], http: httpx.AsyncClient
) -> None:
    g1, g2, _ = gateways
    r = await http.post(f"{g1}/admin/lora", json=ADAPTER, headers=BEARER)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["loaded"] == ["base-0"] and set(out["failed"]) == {"base-1"}
    assert "base-sql" in (await http.get(f"{engines[0].url}/v1/models")).text
    await wait_for(http, g2, "base-sql", present=True)
    listed = (await http.get(f"{g2}/admin/lora", headers=BEARER)).json()["data"]
    assert listed == [{"name": "base-sql", "model": "base", "path": "/adapters/sql", "replicas": ["base-0"]}]
    assert (await openai.AsyncOpenAI(base_url=f"{g2}/v1", api_key="x").models.retrieve("base-sql")).id
    before = [await served(http, e) for e in engines]
    client = openai.AsyncOpenAI(base_url=f"{g2}/v1", api_key="x", max_retries=0)
    for _ in range(6):  # round robin, but only base-0 has the adapter
        await client.chat.completions.create(model="base-sql", messages=[{"role": "user", "content": "q"}])
    after = [await served(http, e) for e in engines]
    assert after[0] - before[0] == 6 and after[1] == before[1]
    r = await http.post(f"{g2}/admin/lora", json=ADAPTER, headers=BEARER)
    assert r.status_code == 409
    r = await http.delete(f"{g2}/admin/lora/base-sql", headers=BEARER)
    assert r.status_code == 200 and r.json()["unloaded"] == ["base-0"], r.text
    assert "base-sql" not in (await http.get(f"{engines[0].url}/v1/models")).text
    await wait_for(http, g1, "base-sql", present=False)
    with pytest.raises(openai.NotFoundError):
        await openai.AsyncOpenAI(base_url=f"{g1}/v1", api_key="x", max_retries=0).chat.completions.create(
            model="base-sql", messages=[{"role": "user", "content": "q"}]
        )
    assert (await http.delete(f"{g1}/admin/lora/base-sql", headers=BEARER)).status_code == 404


async def test_no_replica_loads_it(gateways: list[str], http: httpx.AsyncClient) -> None:
    """Every replica of the model refuses: 502 naming each refusal, and the name is not recorded."""
    r = await http.post(f"{gateways[0]}/admin/lora", json={**ADAPTER, "model": "refuser"}, headers=BEARER)
    assert r.status_code == 502 and "refuser-0" in r.json()["error"]["message"], r.text
    r = await http.post(f"{gateways[0]}/admin/lora", json={**ADAPTER, "path": ""}, headers=BEARER)
    assert r.status_code == 400  # an empty path is refused before any replica is asked
    assert "base-sql" not in await model_ids(http, gateways[0])


async def test_an_adapter_leaves_a_restarted_replica_and_is_never_routed_to_one_without_it(
    tmp_path: Path, redis_url: str, engines: list[Proc], http: httpx.AsyncClient
) -> None:
    """Defect 7: adapter affinity was by replica id, so after a restart (same id, new instance, adapter
    gone) adapter requests reached a replica without it."""
    prefix = f"lr{uuid.uuid4().hex[:8]}"
    await register(redis_url, prefix, "base", engines[0].url, "base-0", instance="one")
    await register(redis_url, prefix, "base", engines[1].url, "base-1", instance="one")
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix, admin_key=ADMIN, lora_sync_s=0.1) as gw:
        loaded = await http.post(f"{gw}/admin/lora", json=ADAPTER, headers=BEARER)
        assert loaded.status_code == 200 and loaded.json()["loaded"] == ["base-0"], loaded.text
        await register(redis_url, prefix, "base", engines[0].url, "base-0", instance="two")  # restarted

        async def left() -> bool:
            listed = (await http.get(f"{gw}/admin/lora", headers=BEARER)).json()["data"]
            return listed[0]["replicas"] == []

        await until(left, 10.0, "the adapter leaving the restarted replica")
        started = (await http.get(f"{engines[0].url}/stats")).json()["started"]
        body = {"model": "base-sql", "messages": [{"role": "user", "content": "hi"}]}
        r = await http.post(f"{gw}/v1/chat/completions", json=body)
        assert r.status_code == 503, r.text
        assert "base-sql" in r.json()["error"]["message"] and "loaded" in r.json()["error"]["message"]
        assert (await http.get(f"{engines[0].url}/stats")).json()["started"] == started
