"""Response affinity across two real gateways and two FAKE ENGINE replicas (each keeps its own stored
responses in memory, as vLLM does): follow-ups, GET and cancel reach the replica that made the response
whichever gateway they pass; when that replica has left or restarted, a clear 404, never another replica."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import openai
import pytest
import redis.asyncio as aioredis

from llmgw_contract.redis_keys import RedisKeys
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import Proc, start_fake_engine

MODEL = "resp-model"
FLEET = fleet_yaml(
    [
        {
            "name": MODEL,
            "source": {"path": "/nonexistent"},
            "policy": "round_robin",
            "engine": {"responses_store": True},
        }
    ]
)


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Proc]]:
    tmp = tmp_path_factory.mktemp("fake")
    procs = [start_fake_engine(tmp, "--tokens", "2") for _ in range(2)]
    yield procs
    for p in procs:
        p.stop()


@pytest.fixture
def prefix() -> str:
    return f"ra{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def gateways(
    tmp_path: Path, redis_url: str, prefix: str, engines: list[Proc]
) -> AsyncIterator[list[str]]:
    for i, e in enumerate(engines):
        await register(redis_url, prefix, MODEL, e.url, f"{MODEL}-{i}", instance="first")
    async with (
        serve_gateway(tmp_path, FLEET, redis_url, prefix) as g1,
        serve_gateway(tmp_path, FLEET, redis_url, prefix) as g2,
    ):
        yield [g1, g2]


def oai(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def tag(response_id: str, engines: list[Proc]) -> int:
    """Which engine made a response: the fake engine puts its port in the id."""
    return next(i for i, e in enumerate(engines) if response_id.startswith(f"resp_{e.port}"))


async def test_follow_ups_reach_the_holder_through_any_gateway(
    gateways: list[str], engines: list[Proc], redis_url: str, prefix: str
) -> None:
    g1, g2 = oai(gateways[0]), oai(gateways[1])
    made = [await g1.responses.create(model=MODEL, input=f"q{i}") for i in range(4)]
    assert {tag(r.id, engines) for r in made} == {0, 1}, "round robin spreads the creations"
    for first in made:
        for _ in range(3):  # round robin alone would send every other follow-up to the wrong replica
            follow = await g2.responses.create(model=MODEL, input="more", previous_response_id=first.id)
            assert f"after {first.id}" in follow.output_text
            assert tag(follow.id, engines) == tag(first.id, engines)
        assert (await g2.responses.retrieve(first.id)).id == first.id
        assert (await g1.responses.cancel(first.id)).status == "cancelled"
    r = aioredis.Redis.from_url(redis_url)
    ttl = await r.pttl(RedisKeys(prefix).response(MODEL, made[0].id))
    await r.aclose()
    assert 0 < ttl <= 86_400_000


async def test_streamed_creation_is_recorded(gateways: list[str], engines: list[Proc]) -> None:
    stream = await oai(gateways[0]).responses.create(model=MODEL, input="s", stream=True)
    rid = ""
    async for event in stream:
        if event.type == "response.created":
            rid = event.response.id
    for _ in range(3):
        follow = await oai(gateways[1]).responses.create(model=MODEL, input="x", previous_response_id=rid)
        assert tag(follow.id, engines) == tag(rid, engines)


async def test_unknown_response_is_a_clear_404(gateways: list[str]) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        for method, path in (("GET", "/v1/responses/resp_nope"), ("POST", "/v1/responses/resp_nope/cancel")):
            r = await http.request(method, f"{gateways[0]}{path}")
            assert r.status_code == 404 and r.json()["error"]["code"] == "response_not_found", r.text
        r = await http.get(f"{gateways[0]}/v1/responses/bad$id")
        assert r.status_code == 404 and r.json()["error"]["code"] in ("not_found", "response_not_found")


async def wait_replicas(url: str, count: int, deadline_s: float = 10.0) -> None:
    """Poll the gateway's /ready (without blocking its event loop, which is this test's) until it sees
    ``count`` replicas of the model."""
    async with httpx.AsyncClient(timeout=2) as http:

        async def seen() -> bool:
            return bool((await http.get(f"{url}/ready")).json()["models"][MODEL]["replicas"] == count)

        await until(seen, deadline_s, f"{url} seeing {count} replicas")


async def test_holder_gone_or_restarted_is_said_never_rerouted(
    gateways: list[str], engines: list[Proc], redis_url: str, prefix: str
) -> None:
    g1, g2 = oai(gateways[0]), oai(gateways[1])
    made = [await g1.responses.create(model=MODEL, input=f"q{i}") for i in range(2)]
    lost = next(r for r in made if tag(r.id, engines) == 0)
    kept = next(r for r in made if tag(r.id, engines) == 1)
    r = aioredis.Redis.from_url(redis_url)
    await r.hdel(RedisKeys(prefix).registry(MODEL), f"{MODEL}-0")
    await r.aclose()
    for url in gateways:
        await wait_replicas(url, 1)
    with pytest.raises(openai.NotFoundError) as err:
        await g2.responses.create(model=MODEL, input="x", previous_response_id=lost.id)
    assert err.value.code == "response_replica_gone" and f"{MODEL}-0" in err.value.message
    with pytest.raises(openai.NotFoundError) as err:
        await g1.responses.retrieve(lost.id)
    assert err.value.code == "response_replica_gone"
    assert (
        tag((await g2.responses.create(model=MODEL, input="x", previous_response_id=kept.id)).id, engines)
        == 1
    )
    # the replica comes back under the same id but as a new start: its memory, and the response, are gone
    await register(redis_url, prefix, MODEL, engines[0].url, f"{MODEL}-0", instance="second")
    for url in gateways:
        await wait_replicas(url, 2)
    with pytest.raises(openai.NotFoundError) as err:
        await g1.responses.create(model=MODEL, input="x", previous_response_id=lost.id)
    assert err.value.code == "response_replica_gone"
