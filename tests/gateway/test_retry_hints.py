"""Retry hints that the official client acts on, checked with the real openai SDK (its default two
retries) against FAKE ENGINE replicas: an error made after a replica got the request says
``x-should-retry: false`` (the generation runs once), one made before any replica saw it says ``true``
with ``retry-after-ms`` and ``retry-after`` (the SDK's own retry then succeeds)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import httpx
import openai
import pytest

from gateway.errors import GatewayError, QueueFull, ReplicaError, UpstreamError, UpstreamTimeout, WakeTimeout
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import Proc, start_fake_engine

MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


# FAKE ENGINE replicas: one works 0.3 s then answers 500, one answers after 1.5 s, one after 0.4 s
ENGINES = {
    "slow500": ("--fault", "slow-500-300"),
    "slow": ("--latency-ms", "1500"),
    "busy": ("--latency-ms", "400"),
}


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Proc]]:
    tmp = tmp_path_factory.mktemp("engines")
    procs = {name: start_fake_engine(tmp, *args) for name, args in ENGINES.items()}
    yield procs
    for p in procs.values():
        p.stop()


async def started(engine: Proc) -> int:
    async with httpx.AsyncClient(timeout=10) as c:
        return int((await c.get(f"{engine.url}/stats")).json()["started"])


def sdk(base: str) -> openai.AsyncOpenAI:
    """The official client as a user gets it: default retries (2), an API key it must send."""
    return openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="unused")


async def gateway_for(
    tmp: Path, redis_url: str, engine: Proc, concurrency: int = 8, **settings: float
) -> AbstractAsyncContextManager[str]:
    prefix = f"rh{uuid.uuid4().hex[:8]}"
    await register(redis_url, prefix, "m", engine.url, "m-0", concurrency=concurrency)
    model = {"name": "m", "source": {"path": "/x"}, "policy": "round_robin", "concurrency": concurrency}
    return serve_gateway(tmp, fleet_yaml([{**model, "max_queue": 0}]), redis_url, prefix, **settings)


@pytest.mark.parametrize(
    ("engine_name", "status", "settings"),
    [
        ("slow500", 500, {"health_interval_s": 60.0}),  # the replica works 0.3 s, then answers 500
        ("slow", 504, {"request_timeout_s": 0.5}),  # no answer within the request's deadline
    ],
)
async def test_an_error_after_dispatch_runs_once_and_the_sdk_does_not_retry(
    tmp_path: Path,
    redis_url: str,
    engines: dict[str, Proc],
    engine_name: str,
    status: int,
    settings: dict[str, float],
) -> None:
    engine = engines[engine_name]
    before = await started(engine)
    async with await gateway_for(tmp_path, redis_url, engine, **settings) as gw:
        client = sdk(gw)
        with pytest.raises(openai.APIStatusError) as raised:
            await client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=4)
        await client.close()
    assert raised.value.status_code == status
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert await started(engine) - before == 1  # one engine run for one call with the SDK's default retries


async def test_a_429_from_admission_is_retried_by_the_sdk_and_succeeds(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    """Capacity one, no queue: the second call gets a 429 while the first runs; the SDK waits what
    ``retry-after-ms`` says and its retry is served. The gateway counts the retried request."""
    engine = engines["busy"]
    async with await gateway_for(tmp_path, redis_url, engine, concurrency=1) as gw:
        client = sdk(gw)
        first = asyncio.create_task(
            client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=4)
        )
        await asyncio.sleep(0.15)
        async with httpx.AsyncClient(timeout=10) as c:
            raw = await c.post(f"{gw}/v1/chat/completions", json={"model": "m", "messages": MESSAGES})
        second = await client.with_raw_response.chat.completions.create(
            model="m", messages=MESSAGES, max_tokens=4
        )
        await first
        await client.close()
        async with httpx.AsyncClient(timeout=10) as c:
            metrics = (await c.get(f"{gw}/metrics")).text
    assert raw.status_code == 429
    assert raw.headers["x-should-retry"] == "true"
    assert int(raw.headers["retry-after-ms"]) > 0 and int(raw.headers["retry-after"]) >= 1
    assert second.http_response.status_code == 200
    assert second.retries_taken >= 1
    assert 'llmgw_client_retries_total{model="m"}' in metrics
    retried = [ln for ln in metrics.splitlines() if ln.startswith('llmgw_client_retries_total{model="m"}')]
    assert float(retried[0].split()[-1]) == second.retries_taken


@pytest.mark.parametrize(
    ("error", "retry"),
    [
        (UpstreamError("x"), "false"),
        (ReplicaError("x"), "false"),
        (UpstreamTimeout("x"), "false"),
        (QueueFull("x", retry_after=1.5), "true"),
        (WakeTimeout("x", retry_after=3.0), "true"),
    ],
)
def test_every_error_answer_carries_its_hint(error: GatewayError, retry: str) -> None:
    headers = error.headers()
    assert headers["x-should-retry"] == retry
    if retry == "true":
        assert int(headers["retry-after-ms"]) == round(error.retry_after * 1000)  # type: ignore[operator]
        assert int(headers["retry-after"]) >= 1
    else:
        assert "retry-after" not in headers
