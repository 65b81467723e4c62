"""Background Responses across two real gateways (API keys on) and one FAKE ENGINE, with the ``openai``
SDK as the client: created on one gateway, polled, streamed and cancelled on the other, for the tenant
that owns it only; a stream from ``starting_after=N`` is the tail of the whole stream, byte for byte;
a cancel stops the generation on the engine."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
import redis.asyncio as aioredis

from gateway.auth.keys import ApiKey, KeyStore, new_secret
from llmgw_contract.redis_keys import RedisKeys
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import Proc, start_fake_engine

MODEL = "bg"
FLEET = fleet_yaml([{"name": MODEL, "source": {"path": "/nonexistent"}, "policy": "round_robin"}])


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("bg"), "--tokens", "6", "--delay-ms", "40")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, engine: Proc
) -> AsyncIterator[tuple[list[str], list[str]]]:
    """Two gateways and the secrets of two tenants' keys."""
    tmp, prefix = tmp_path_factory.mktemp("bg-gw"), f"b{uuid.uuid4().hex[:8]}"
    await register(redis_url, prefix, MODEL, engine.url, f"{MODEL}-0")
    redis = aioredis.from_url(redis_url)
    store, secrets = KeyStore(redis, RedisKeys(prefix)), []
    for tenant in ("owner", "other"):
        key_id, secret = new_secret()
        await store.create(ApiKey(key_id, tenant, (MODEL,)), secret)
        secrets.append(secret)
    await redis.aclose()
    async with (
        serve_gateway(tmp, FLEET, redis_url, prefix, auth=True, health_interval_s=60) as g1,
        serve_gateway(tmp, FLEET, redis_url, prefix, auth=True, health_interval_s=60) as g2,
    ):
        yield [g1, g2], secrets


def sdk(url: str, secret: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=secret, max_retries=0)


async def stats(engine: Proc) -> dict[str, Any]:
    async with httpx.AsyncClient() as c:
        return dict((await c.get(f"{engine.url}/stats")).json())


async def raw_stream(url: str, secret: str, rid: str, query: str) -> bytes:
    async with httpx.AsyncClient(timeout=10) as c:
        r = await c.get(
            f"{url}/v1/responses/{rid}?stream=true{query}", headers={"authorization": f"Bearer {secret}"}
        )
        assert r.status_code == 200
        return r.content


async def test_created_on_one_gateway_polled_and_streamed_on_the_other(
    stack: tuple[list[str], list[str]], engine: Proc
) -> None:
    (a, b), (secret, _) = stack
    before = (await stats(engine))["started"]
    created = await sdk(a, secret).responses.create(model=MODEL, input="hi", background=True)
    assert created.status == "queued" and created.background is True and created.id.startswith("resp_")
    live = [e async for e in await sdk(b, secret).responses.retrieve(created.id, stream=True)]
    got = await sdk(b, secret).responses.retrieve(created.id)
    assert got.status == "completed" and got.id == created.id and got.background is True
    assert got.output_text.startswith("answer from")
    assert [e.sequence_number for e in live] == list(range(len(live))) and len(live) == 11
    assert live[-1].type == "response.completed" and live[-1].response.id == created.id
    tail = [
        e async for e in await sdk(a, secret).responses.retrieve(created.id, stream=True, starting_after=3)
    ]
    assert [e.model_dump() for e in tail] == [e.model_dump() for e in live[4:]]
    whole = await raw_stream(b, secret, created.id, "")
    after = await raw_stream(a, secret, created.id, "&starting_after=3")
    assert whole.endswith(after) and whole.count(b"\n\n") == 11 and after.count(b"\n\n") == 7
    assert (await stats(engine))["started"] - before == 1


async def test_a_cancel_on_the_other_gateway_stops_the_generation(
    stack: tuple[list[str], list[str]], engine: Proc
) -> None:
    (a, b), (secret, _) = stack
    created = await sdk(a, secret).responses.create(
        model=MODEL, input="hi", background=True, max_output_tokens=200
    )  # 8 s of tokens

    async def running() -> bool:
        return (await sdk(b, secret).responses.retrieve(created.id)).status == "in_progress"

    await until(running, 3.0, "the response in progress")
    cancelled = await sdk(b, secret).responses.cancel(created.id)
    assert cancelled.status == "cancelled" and cancelled.id == created.id

    async def idle() -> bool:
        return int((await stats(engine))["inflight"]) == 0

    await until(idle, 2.0, "the generation stopped on the engine")
    assert (await sdk(a, secret).responses.retrieve(created.id)).status == "cancelled"
    events = [e async for e in await sdk(b, secret).responses.retrieve(created.id, stream=True)]
    assert events[0].type == "response.created" and events[-1].type != "response.completed"
    again = await sdk(a, secret).responses.cancel(created.id)
    assert again.status == "cancelled"
    async with httpx.AsyncClient() as c:

        async def counted() -> bool:
            text = (await c.get(f"{a}/metrics")).text
            return 'llmgw_background_responses_total{outcome="cancelled"} 1.0' in text

        await until(counted, 2.0, "the cancel counted by the gateway that ran it")


async def test_another_tenant_gets_404_and_background_needs_store(stack: tuple[list[str], list[str]]) -> None:
    (a, b), (secret, other) = stack
    stream = await sdk(a, secret).responses.create(model=MODEL, input="hi", background=True, stream=True)
    events = [e async for e in stream]
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    created = events[-1].response
    assert created.id.startswith("resp_bg") and created.background is True
    for call in (sdk(b, other).responses.retrieve, sdk(b, other).responses.cancel):
        with pytest.raises(openai.NotFoundError) as found:
            await call(created.id)
        assert found.value.code == "response_not_found"
    with pytest.raises(openai.BadRequestError) as refused:
        await sdk(a, secret).responses.create(model=MODEL, input="hi", background=True, store=False)
    assert refused.value.param == "store"
