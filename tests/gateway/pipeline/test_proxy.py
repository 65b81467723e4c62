"""The request path against a real gateway, real Redis and the FAKE ENGINE (no vLLM needed)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest

from gateway.auth.base import OpenAuth
from gateway.fleet_reload import FleetReload
from gateway.values import Caller, Charge, TokenCost
from llmgw_contract.fleet import parse_fleet
from testing.gateway import fleet_yaml, register, serve_app, serve_gateway
from testing.poll import until
from testing.procs import Proc, start_fake_engine


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"), "--tokens", "5")
    yield proc
    proc.stop()


FLEET = fleet_yaml(
    [
        {"name": "fake-chat", "aliases": ["fc"], "source": {"path": "/nonexistent"}, "policy": "round_robin"},
        {"name": "fake-embed", "source": {"path": "/nonexistent"}, "engine": {"runner": "pooling"}},
        {"name": "empty", "source": {"path": "/nonexistent"}},
    ]
)


@pytest.fixture
async def gw(tmp_path: Path, redis_url: str, engine: Proc) -> AsyncIterator[str]:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    await register(redis_url, prefix, "fake-chat", engine.url, "fake-chat-0")
    await register(redis_url, prefix, "fake-embed", engine.url, "fake-embed-0")
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix) as url:
        yield url


def assert_openai_error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code and err["message"]


async def test_chat_and_alias_with_openai_sdk(gw: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{gw}/v1", api_key="unused")
    for name in ("fake-chat", "fc"):
        out = await client.chat.completions.create(model=name, messages=[{"role": "user", "content": "hi"}])
        assert out.choices[0].message.content == "tok0 tok1 tok2 tok3 tok4 "
        assert out.usage is not None and out.usage.completion_tokens == 5


async def test_streaming_chat_with_openai_sdk(gw: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{gw}/v1", api_key="unused")
    stream = await client.chat.completions.create(
        model="fake-chat", messages=[{"role": "user", "content": "hi"}], stream=True, max_tokens=7
    )
    parts = [c.choices[0].delta.content async for c in stream]
    assert parts == [f"tok{i} " for i in range(7)]

    async def gaps() -> float:  # the gaps between its chunks, counted once the stream ended (batched)
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"{gw}/metrics")).text
        line = 'llmgw_inter_token_seconds_count{model="fake-chat"} '
        return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith(line))

    assert await until(gaps, 5, "the stream's gaps in llmgw_inter_token_seconds") >= 1


async def test_completions_and_embeddings(gw: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{gw}/v1", api_key="unused")
    out = await client.completions.create(model="fake-chat", prompt="The capital of France is", max_tokens=3)
    assert out.choices[0].text == "tok0 tok1 tok2 "
    emb = await client.embeddings.create(model="fake-embed", input="hello")
    assert len(emb.data[0].embedding) == 8


async def test_models_lists_every_name_and_alias(http: httpx.AsyncClient, gw: str) -> None:
    r = await http.get(f"{gw}/v1/models")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    assert {m["id"] for m in body["data"]} == {"fake-chat", "fc", "fake-embed", "empty"}


async def test_request_id_propagated_or_created(http: httpx.AsyncClient, gw: str) -> None:
    body = {"model": "fake-chat", "messages": [{"role": "user", "content": "hi"}]}
    r = await http.post(f"{gw}/v1/chat/completions", json=body, headers={"x-request-id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    r = await http.post(f"{gw}/v1/chat/completions", json=body)
    assert len(r.headers["x-request-id"]) == 32


async def test_client_request_id_is_not_vllms_internal_id(
    http: httpx.AsyncClient, gw: str, engine: Proc
) -> None:
    # vLLM uses the X-Request-Id it gets as its internal request id: two requests with one client id
    # must reach it with two ids (the client's, made safe, plus a unique suffix); the client gets its own.
    body = {"model": "fake-chat", "messages": [{"role": "user", "content": "hi"}]}
    sent = []
    for _ in range(2):
        r = await http.post(f"{gw}/v1/chat/completions", json=body, headers={"x-request-id": "my id/1"})
        assert r.headers["x-request-id"] == "my id/1"
        sent.append((await http.get(f"{engine.url}/stats")).json()["last_headers"]["x-request-id"])
    assert sent[0] != sent[1]
    assert all(s.startswith("my_id_1-") and " " not in s for s in sent)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_request"),
        (b"[1, 2]", 400, "invalid_request"),
        (b'{"messages": []}', 400, "invalid_request"),
        (b'{"model": 7, "messages": []}', 400, "invalid_request"),
        (b'{"model": "nope", "messages": []}', 404, "model_not_found"),
        (b'{"model": "fake-chat", "messages": [], "stream": "yes"}', 400, "invalid_request"),
        (b'{"model": "fake-chat", "messages": [], "max_tokens": -1}', 400, "invalid_request"),
        (b'{"model": "fake-embed", "messages": []}', 400, "invalid_request"),
        (b'{"model": "empty", "messages": []}', 503, "no_ready_replica"),
    ],
)
async def test_bad_requests_get_openai_errors(
    http: httpx.AsyncClient, gw: str, body: bytes, status: int, code: str
) -> None:
    r = await http.post(
        f"{gw}/v1/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    assert_openai_error(r, status, code)


async def test_body_too_large(http: httpx.AsyncClient, gw: str) -> None:
    r = await http.post(f"{gw}/v1/chat/completions", content=b"x" * (5 * 1024 * 1024))
    assert_openai_error(r, 413, "request_too_large")


async def test_unknown_path_and_method(http: httpx.AsyncClient, gw: str) -> None:
    assert_openai_error(await http.get(f"{gw}/v1/nothing"), 404, "not_found")
    assert_openai_error(await http.get(f"{gw}/v1/chat/completions"), 405, "method_not_allowed")


async def test_health_ready_metrics(http: httpx.AsyncClient, gw: str) -> None:
    assert (await http.get(f"{gw}/health")).json() == {"status": "ok"}
    ready = (await http.get(f"{gw}/ready")).json()
    assert ready["ready"] and ready["redis"] == "ok"
    assert ready["models"]["fake-chat"]["ready_replicas"] == 1
    await http.post(
        f"{gw}/v1/chat/completions", json={"model": "fc", "messages": [{"role": "user", "content": "x"}]}
    )
    text = (await http.get(f"{gw}/metrics")).text
    assert 'llmgw_requests_total{model="fake-chat",status="200"}' in text
    assert "vllm:" not in text


class ReloadWhileCharging(OpenAuth):
    """A test double of the authenticator: while the request is being charged (after the model was
    resolved, before its pool is looked up), the fleet is reloaded without that model."""

    def __init__(self, reload: Callable[[], None]) -> None:
        self.reload = reload

    async def charge(self, caller: Caller, model: str, cost: TokenCost) -> Charge | None:
        self.reload()
        return None


async def test_a_reload_that_removes_the_model_mid_request_answers_404_not_500(
    tmp_path: Path, redis_url: str, engine: Proc
) -> None:
    """Defect 5: a reload between resolve and the pool lookup raised KeyError (500)."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    await register(redis_url, prefix, "fake-chat", engine.url, "fake-chat-0")
    await register(redis_url, prefix, "fake-embed", engine.url, "fake-embed-0")
    async with serve_app(tmp_path, FLEET, redis_url, prefix) as (url, app):
        gw = app.state.gateway
        smaller = parse_fleet(fleet_yaml([{"name": "fake-embed", "source": {"path": "/nonexistent"}}]))
        gw.auth = ReloadWhileCharging(lambda: FleetReload(gw, app.state.discovery).apply(smaller))
        async with httpx.AsyncClient() as c:
            body = {"model": "fake-chat", "messages": [{"role": "user", "content": "hi"}]}
            r = await c.post(f"{url}/v1/chat/completions", json=body)
    assert_openai_error(r, 404, "model_not_found")
