"""``x-ratelimit-*`` headers, as OpenAI sends them (clients and LiteLLM read them), on the answers of keys
with limits (issue 45): the limit, what is left in the current window and when it resets, for requests
(a key's rpm) and tokens (its tpm), taken from the counts the charging script already returns (no extra
Redis call). On answers, streamed or not, and on the 429 of a limit; none for a key without limits."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from gateway.auth.keys import ApiKey, KeyStore, new_secret
from gateway.auth.ratelimit import Decision, RateLimiter, Verdict, limit_headers, reset_text
from llmgw_contract.redis_keys import RedisKeys
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import Proc, start_fake_engine
from tests.gateway.auth.test_ratelimit import clear_of_window_edge

FLEET = fleet_yaml([{"name": "m", "source": {"path": "/nonexistent"}, "policy": "round_robin"}])
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
NAMES = [
    f"x-ratelimit-{kind}-{what}"
    for what in ("requests", "tokens")
    for kind in ("limit", "remaining", "reset")
]


def test_headers_of_a_decision() -> None:
    d = Decision(Verdict.OK, 12.25, 7, requests_used=3, tokens_used=250)
    assert dict(limit_headers(10, 1000, d)) == {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "7",
        "x-ratelimit-reset-requests": "12.25s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "750",
        "x-ratelimit-reset-tokens": "12.25s",
    }
    assert [k for k, _ in limit_headers(5, 0, d)] == NAMES[:3]  # requests only: no token headers
    assert limit_headers(0, 0, d) == []
    over = Decision(Verdict.RPM, 0.5, 7, requests_used=12, tokens_used=0)
    assert dict(limit_headers(10, 0, over))["x-ratelimit-remaining-requests"] == "0"


def test_reset_is_written_as_openai_writes_it() -> None:
    assert [reset_text(s) for s in (59.5, 60.0, 1.0, 0.25, 0.0)] == ["59.5s", "60s", "1s", "250ms", "0ms"]


async def test_the_charging_script_returns_the_counts(redis_url: str, prefix: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        limiter = RateLimiter(client, RedisKeys(prefix))
        await clear_of_window_edge(client)
        await limiter.charge("k", 5, 100, 30)
        second = await limiter.charge("k", 5, 100, 20)
        refused = await limiter.charge("k", 5, 100, 60)
    finally:
        await client.aclose()
    assert (second.requests_used, second.tokens_used) == (2, 50)
    assert (refused.verdict, refused.requests_used, refused.tokens_used) == (Verdict.TPM, 2, 50)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"), "--tokens", "3")
    yield proc
    proc.stop()


@pytest.fixture
async def gateway(tmp_path: Path, redis_url: str, prefix: str, engine: Proc) -> AsyncIterator[str]:
    await register(redis_url, prefix, "m", engine.url, "m-0")
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix, auth=True) as gw:
        yield gw


async def key(store: KeyStore, rpm: int = 0, tpm: int = 0) -> dict[str, str]:
    key_id, secret = new_secret()
    await store.create(ApiKey(key_id, f"tenant-{key_id}", ("m",), rpm=rpm, tpm=tpm), secret)
    return {"authorization": f"Bearer {secret}"}


async def test_answers_carry_the_keys_limits(
    gateway: str, http: httpx.AsyncClient, store: KeyStore, redis: aioredis.Redis
) -> None:
    limited, open_key = await key(store, rpm=2, tpm=1000), await key(store)
    await clear_of_window_edge(redis)
    whole = await http.post(f"{gateway}/v1/chat/completions", json=BODY, headers=limited)
    streamed = await http.post(
        f"{gateway}/v1/chat/completions", json={**BODY, "stream": True}, headers=limited
    )
    refused = await http.post(f"{gateway}/v1/chat/completions", json=BODY, headers=limited)
    unlimited = await http.post(f"{gateway}/v1/chat/completions", json=BODY, headers=open_key)
    assert [r.status_code for r in (whole, streamed, refused, unlimited)] == [200, 200, 429, 200]
    for r in (whole, streamed, refused):
        assert all(name in r.headers for name in NAMES), r.headers
        assert (
            r.headers["x-ratelimit-limit-requests"] == "2" and r.headers["x-ratelimit-limit-tokens"] == "1000"
        )
        assert r.headers["x-ratelimit-reset-requests"].endswith("s")
    assert [r.headers["x-ratelimit-remaining-requests"] for r in (whole, streamed, refused)] == [
        "1",
        "0",
        "0",
    ]
    assert int(whole.headers["x-ratelimit-remaining-tokens"]) < 1000
    assert not any(name in unlimited.headers for name in NAMES)
