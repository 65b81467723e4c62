"""API keys through two real gateways (LLMGW_AUTH=true) in front of the FAKE ENGINE: 401, 403, and RPM/TPM
limits exact across both gateways; the bearer secret never reaches a log line."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from gateway.auth.keys import ApiKey, KeyStore, new_secret
from llmgw_contract.redis_keys import RedisKeys
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import Proc, start_fake_engine
from tests.gateway.auth.test_ratelimit import clear_of_window_edge

FLEET = fleet_yaml(
    [
        {"name": "open-model", "source": {"path": "/nonexistent"}, "policy": "round_robin"},
        {"name": "closed-model", "source": {"path": "/nonexistent"}, "policy": "round_robin"},
    ]
)
MAX_TOKENS = 10
BODY = {"model": "open-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": MAX_TOKENS}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"), "--tokens", "3")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def slow_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("slow"), "--tokens", "3", "--latency-ms", "3000")
    yield proc
    proc.stop()


@pytest.fixture
async def gateways(tmp_path: Path, redis_url: str, prefix: str, engine: Proc) -> AsyncIterator[list[str]]:
    for model in ("open-model", "closed-model"):
        await register(redis_url, prefix, model, engine.url, f"{model}-0")
    async with (
        serve_gateway(tmp_path, FLEET, redis_url, prefix, auth=True) as g1,
        serve_gateway(tmp_path, FLEET, redis_url, prefix, auth=True) as g2,
    ):
        yield [g1, g2]


async def make_key(store: KeyStore, **limits: int) -> str:
    key_id, secret = new_secret()
    await store.create(ApiKey(key_id, f"tenant-{key_id}", ("open-model",), **limits), secret)
    return secret


def auth(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"}


def error_code(r: httpx.Response) -> str:
    code: str = r.json()["error"]["code"]
    return code


async def test_no_model_without_a_valid_key(
    gateways: list[str], http: httpx.AsyncClient, store: KeyStore
) -> None:
    url = f"{gateways[0]}/v1/chat/completions"
    r = await http.post(url, json=BODY)
    assert r.status_code == 401 and error_code(r) == "invalid_api_key"
    r = await http.post(url, json=BODY, headers=auth("llmgw-nope-nope"))
    assert r.status_code == 401 and error_code(r) == "invalid_api_key"
    secret = await make_key(store)
    assert (await http.post(url, json=BODY, headers=auth(secret))).status_code == 200


async def test_anthropic_x_api_key_and_error_shape(
    gateways: list[str], http: httpx.AsyncClient, store: KeyStore
) -> None:
    """Anthropic's SDK sends its key as ``x-api-key``; refusals on /v1/messages are in Anthropic's shape."""
    url = f"{gateways[1]}/v1/messages"
    body = {**BODY, "max_tokens": 3}
    r = await http.post(url, json=body, headers={"x-api-key": "llmgw-nope-nope"})
    assert r.status_code == 401, r.text
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "authentication_error"
    secret = await make_key(store)
    r = await http.post(url, json=body, headers={"x-api-key": secret})
    assert r.status_code == 200 and r.json()["type"] == "message"
    r = await http.post(url, json={**body, "model": "closed-model"}, headers={"x-api-key": secret})
    assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"


async def test_key_never_reaches_a_model_it_does_not_allow(
    gateways: list[str], http: httpx.AsyncClient, store: KeyStore
) -> None:
    secret = await make_key(store)
    body = {**BODY, "model": "closed-model"}
    r = await http.post(f"{gateways[1]}/v1/chat/completions", json=body, headers=auth(secret))
    assert r.status_code == 403 and error_code(r) == "model_not_allowed"


async def test_per_model_base_paths_take_the_same_keys(
    gateways: list[str], http: httpx.AsyncClient, store: KeyStore
) -> None:
    """``/models/{model}/...`` (lm-eval's remote tokenizer) is authenticated and scoped like the rest."""
    info = f"{gateways[0]}/models/open-model/tokenizer_info"
    assert error_code(await http.get(info)) == "invalid_api_key"
    secret = await make_key(store)
    assert (await http.get(info, headers=auth(secret))).status_code == 200
    r = await http.post(
        f"{gateways[0]}/models/closed-model/tokenize", json={"prompt": "a b"}, headers=auth(secret)
    )
    assert r.status_code == 403 and error_code(r) == "model_not_allowed"


async def test_revoked_key_is_refused_at_once(
    gateways: list[str], http: httpx.AsyncClient, store: KeyStore
) -> None:
    secret = await make_key(store)
    url = f"{gateways[0]}/v1/chat/completions"
    assert (await http.post(url, json=BODY, headers=auth(secret))).status_code == 200
    await store.revoke(secret.split("-")[1])
    assert (await http.post(url, json=BODY, headers=auth(secret))).status_code == 401


async def test_rpm_exact_across_two_gateways(
    gateways: list[str], http: httpx.AsyncClient, store: KeyStore, redis: aioredis.Redis
) -> None:
    secret = await make_key(store, rpm=7)
    await clear_of_window_edge(redis)
    rs = await asyncio.gather(
        *(
            http.post(f"{gateways[i % 2]}/v1/chat/completions", json=BODY, headers=auth(secret))
            for i in range(20)
        )
    )
    assert Counter(r.status_code for r in rs) == {200: 7, 429: 13}
    refused = [r for r in rs if r.status_code == 429]
    assert all(error_code(r) == "rate_limit_exceeded" and int(r.headers["retry-after"]) >= 1 for r in refused)
    assert "7 requests per minute" in refused[0].json()["error"]["message"]


@pytest.fixture
async def slow_gateways(
    tmp_path: Path, redis_url: str, prefix: str, slow_engine: Proc
) -> AsyncIterator[list[str]]:
    """Two gateways whose replica answers after 3 s: every request is charged long before any ends
    (and refunds what it did not use)."""
    await register(redis_url, prefix, "open-model", slow_engine.url, "open-model-0")
    async with (
        serve_gateway(tmp_path, FLEET, redis_url, prefix, auth=True) as g1,
        serve_gateway(tmp_path, FLEET, redis_url, prefix, auth=True) as g2,
    ):
        yield [g1, g2]


async def test_tpm_exact_across_two_gateways(
    slow_gateways: list[str], http: httpx.AsyncClient, store: KeyStore, redis: aioredis.Redis
) -> None:
    cost = (
        len(httpx.Request("POST", "http://x", json=BODY).content) // 4 + MAX_TOKENS
    )  # as the gateway reserves
    secret = await make_key(store, tpm=3 * cost + cost // 2)
    await clear_of_window_edge(redis)
    rs = await asyncio.gather(
        *(
            http.post(f"{slow_gateways[i % 2]}/v1/chat/completions", json=BODY, headers=auth(secret))
            for i in range(10)
        )
    )
    assert Counter(r.status_code for r in rs) == {200: 3, 429: 7}
    assert "tokens per minute" in next(r for r in rs if r.status_code == 429).json()["error"]["message"]


async def tpm_count(redis: aioredis.Redis, prefix: str, secret: str) -> int:
    """The key's token count in the current window (0 before any charge)."""
    counters = await redis.hgetall(RedisKeys(prefix).rate(secret.split("-")[1]))
    found = [v for f, v in counters.items() if f.startswith(b"tpm:")]
    assert len(found) <= 1
    return int(found[0]) if found else 0


async def test_request_without_max_tokens_reserves_the_context_then_refunds_from_usage(
    slow_gateways: list[str], http: httpx.AsyncClient, store: KeyStore, redis: aioredis.Redis, prefix: str
) -> None:
    # No max_tokens: vLLM may generate up to the context (8192 here), so the request reserves at most
    # the key's whole minute (1000 tokens) while it runs; a second request finds no room. When it ends,
    # its usage (8 prompt + 3 completion tokens from the fake engine) is all that stays charged.
    secret = await make_key(store, tpm=1000)
    await clear_of_window_edge(redis)
    url = f"{slow_gateways[0]}/v1/chat/completions"
    open_ended = {"model": "open-model", "messages": [{"role": "user", "content": "hi"}]}
    running = asyncio.create_task(http.post(url, json=open_ended, headers=auth(secret)))
    await until(lambda: tpm_is(redis, prefix, secret, 1000), 10, "the open-ended request was charged")
    small = await http.post(url, json=BODY, headers=auth(secret))
    assert small.status_code == 429 and error_code(small) == "rate_limit_exceeded"
    r = await running
    assert r.status_code == 200 and r.json()["usage"]["total_tokens"] == 11
    assert await tpm_count(redis, prefix, secret) == 11


async def tpm_is(redis: aioredis.Redis, prefix: str, secret: str, n: int) -> bool:
    return await tpm_count(redis, prefix, secret) == n


async def test_bearer_secret_never_logged(
    gateways: list[str], http: httpx.AsyncClient, store: KeyStore, caplog: pytest.LogCaptureFixture
) -> None:
    secret = await make_key(store, rpm=1)
    caplog.set_level(logging.DEBUG)
    url = f"{gateways[0]}/v1/chat/completions"
    for headers in (auth(secret), auth(secret), auth(secret + "x"), auth(secret)):
        await http.post(url, json=BODY, headers=headers)
    await http.post(url, json={**BODY, "model": "closed-model"}, headers=auth(secret))
    assert caplog.records  # the gateway did log these requests
    # the random part, taken whole: token_urlsafe may itself contain "-", so the text after the last "-"
    # can be a few characters that turn up in any log by chance
    random_part = secret.split("-", 2)[2]
    assert secret not in caplog.text and random_part not in caplog.text


async def test_metrics_by_tenant_when_keys_are_on(
    gateways: list[str], http: httpx.AsyncClient, store: KeyStore
) -> None:
    secret = await make_key(store)
    tenant = f"tenant-{secret.split('-')[1]}"
    for _ in range(2):
        r = await http.post(f"{gateways[0]}/v1/chat/completions", json=BODY, headers=auth(secret))
        assert r.status_code == 200
    text = (await http.get(f"{gateways[0]}/metrics")).text
    assert f'llmgw_tenant_requests_total{{model="open-model",status="200",tenant="{tenant}"}} 2.0' in text
    tokens = f'llmgw_tenant_tokens_total{{kind="completion",model="open-model",tenant="{tenant}"}}'
    assert f"{tokens} {2.0 * MAX_TOKENS}" in text
