"""A whole answer is written to its client before the request settles (its lease released, its unused
tokens refunded), and the settle still runs, once: against a real gateway (API keys with limits, Redis
admission), real Redis and the FAKE ENGINE."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis
from starlette.types import Message

from gateway.auth.keys import ApiKey, KeyStore, new_secret
from gateway.pipeline.replies import WholeResponse
from llmgw_contract.redis_keys import RedisKeys
from testing.gateway import fleet_yaml, register, serve_app
from testing.poll import until
from testing.procs import Proc, start_fake_engine
from tests.gateway.auth.test_ratelimit import clear_of_window_edge

MODEL = "fake-chat"
FLEET = fleet_yaml([{"name": MODEL, "source": {"path": "/nonexistent"}, "policy": "round_robin"}])
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}  # reserves the context
TPM = 100_000
PAUSE_MS = 600  # under the Redis timeout below: the held calls wait, they do not fail


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"), "--tokens", "3")
    yield proc
    proc.stop()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def tokens_counted(redis: aioredis.Redis, keys: RedisKeys, key_id: str) -> int:
    counters = await redis.hgetall(keys.rate(key_id))
    return sum(
        int(v) for f, v in counters.items() if (f if isinstance(f, bytes) else f.encode())[:4] == b"tpm:"
    )


async def test_the_answer_reaches_the_client_before_the_release_and_refund_round_trips(
    tmp_path: Path, redis_url: str, prefix: str, engine: Proc, redis: aioredis.Redis
) -> None:
    """Redis holds every write back (``CLIENT PAUSE WRITE``) from the moment the lease is released: the
    client has the whole answer while the lease is still held and the key's tokens not yet refunded;
    both happen once Redis writes again. Before, the answer waited for the refund's round trip."""
    keys = RedisKeys(prefix)
    await register(redis_url, prefix, MODEL, engine.url, f"{MODEL}-0")
    key_id, secret = new_secret()
    await KeyStore(redis, keys).create(ApiKey(key_id, "acme", (MODEL,), rpm=1000, tpm=TPM), secret)
    await clear_of_window_edge(redis)
    async with serve_app(tmp_path, FLEET, redis_url, prefix, auth=True, admission_redis_timeout_s=3.0) as (
        url,
        app,
    ):
        shared = app.state.gateway.admission.shared  # the Redis queue (behind its local fallback)
        assert app.state.gateway.auth.limiter.lean is shared.lean  # one connection: the settle, one write
        release, released = shared.release, []

        async def paused_release(model: str, lease_id: str) -> None:
            await redis.client_pause(PAUSE_MS, all=False)  # writes held back; reads go on
            released.append(lease_id)
            await release(model, lease_id)

        shared.release = paused_release
        async with httpx.AsyncClient(timeout=10) as http:
            r = await http.post(
                f"{url}/v1/chat/completions", json=BODY, headers={"authorization": f"Bearer {secret}"}
            )
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
        charged = TPM - int(r.headers["x-ratelimit-remaining-tokens"])
        # the answer is here; the settle begins (Redis paused first) and Redis holds its writes back
        await until(lambda: released, 5.0, "the lease's release begun")
        assert await redis.zcard(keys.leases(MODEL)) == 1
        assert await tokens_counted(redis, keys, key_id) == charged
        # and once Redis writes again, both happened, once
        await until(lambda: lease_gone(redis, keys), 5.0, "the lease released")
        used = r.json()["usage"]["prompt_tokens"] + 3
        await until(lambda: refunded(redis, keys, key_id, charged), 5.0, "the unused tokens refunded")
        assert await tokens_counted(redis, keys, key_id) >= used
        assert len(released) == 1


async def lease_gone(redis: aioredis.Redis, keys: RedisKeys) -> bool:
    return int(await redis.zcard(keys.leases(MODEL))) == 0


async def refunded(redis: aioredis.Redis, keys: RedisKeys, key_id: str, charged: int) -> bool:
    return await tokens_counted(redis, keys, key_id) < charged


async def test_the_settle_runs_once_after_the_body_also_when_the_send_fails() -> None:
    """``after`` runs once the body is written; a send that fails (or is cancelled) still runs it, and
    :meth:`WholeResponse.settle` (a response that is never sent) runs it at most once too."""
    events: list[str] = []

    async def after() -> None:
        events.append("settled")

    async def send(message: Message) -> None:
        events.append(message["type"])

    response = WholeResponse(b"{}", 200, "r1", "application/json", after=after)
    await response({"type": "http"}, receive_nothing, send)
    await response.settle()
    assert events == ["http.response.start", "http.response.body", "settled"]

    async def broken(message: Message) -> None:
        raise OSError("the client is gone")

    events.clear()
    response = WholeResponse(b"{}", 200, "r2", "application/json", after=after)
    with pytest.raises(OSError):
        await response({"type": "http"}, receive_nothing, broken)
    assert events == ["settled"]
    kept = WholeResponse(b"{}", 200, "r3", "application/json", after=after)
    await kept.settle()
    await kept.settle()
    assert events == ["settled", "settled"]


async def receive_nothing() -> Message:
    raise AssertionError("a whole answer reads nothing")
