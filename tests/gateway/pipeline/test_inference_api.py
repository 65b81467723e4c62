"""The whole inference API through a real gateway (real Redis) in front of the FAKE ENGINE: the Responses
API, Anthropic's Messages API (with the `anthropic` SDK), vLLM's own endpoints over plain HTTP, audio as
multipart, and OpenAI's models.retrieve; errors in the shape of the API called."""

from __future__ import annotations

import io
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import Proc, start_fake_engine

FLEET = fleet_yaml(
    [
        {
            "name": "fake-chat",
            "aliases": ["fc"],
            "source": {"path": "/nonexistent"},
            "engine": {"responses_store": True, "lora_modules": {"fc-sql": "/adapters/sql"}},
        },
        {"name": "fake-embed", "source": {"path": "/nonexistent"}, "engine": {"runner": "pooling"}},
        {"name": "empty", "source": {"path": "/nonexistent"}},
        {"name": "broken", "source": {"path": "/nonexistent"}},
    ]
)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"), "--tokens", "4")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """A replica whose streams break after two events."""
    proc = start_fake_engine(tmp_path_factory.mktemp("broken"), "--fault", "die-after-2")
    yield proc
    proc.stop()


@pytest.fixture
async def gw(tmp_path: Path, redis_url: str, engine: Proc, broken: Proc) -> AsyncIterator[str]:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    await register(redis_url, prefix, "broken", broken.url, "broken-0")
    await register(redis_url, prefix, "fake-chat", engine.url, "fake-chat-0")
    await register(redis_url, prefix, "fake-embed", engine.url, "fake-embed-0")
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix) as url:
        yield url


def oai(gw: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gw}/v1", api_key="unused", max_retries=0)


def claude(gw: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw, api_key="unused", max_retries=0)


async def test_models_retrieve(gw: str) -> None:
    client = oai(gw)
    for name, root in (("fake-chat", "fake-chat"), ("fc", "fake-chat"), ("fc-sql", "fake-chat")):
        model = await client.models.retrieve(name)
        assert model.id == name and model.model_extra and model.model_extra["root"] == root
    with pytest.raises(openai.NotFoundError) as err:
        await client.models.retrieve("nope")
    assert err.value.code == "model_not_found"


async def test_responses_create_and_follow_up(gw: str) -> None:
    client = oai(gw)
    first = await client.responses.create(model="fc", input="hello", max_output_tokens=3)
    assert first.id.startswith("resp_") and "tok tok tok" in first.output_text
    second = await client.responses.create(model="fake-chat", input="more", previous_response_id=first.id)
    assert f"after {first.id}" in second.output_text
    fetched = await client.responses.retrieve(second.id)
    assert fetched.id == second.id
    cancelled = await client.responses.cancel(second.id)
    assert cancelled.status == "cancelled"


async def test_responses_streaming(gw: str) -> None:
    client = oai(gw)
    stream = await client.responses.create(model="fake-chat", input="hi", stream=True, max_output_tokens=2)
    kinds, text, rid = [], "", ""
    async for event in stream:
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
        if event.type == "response.completed":
            rid = event.response.id
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "tok tok" in text
    follow = await client.responses.create(model="fake-chat", input="again", previous_response_id=rid)
    assert f"after {rid}" in follow.output_text


async def test_anthropic_messages(gw: str) -> None:
    client = claude(gw)
    msg = await client.messages.create(model="fc", max_tokens=3, messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].type == "text" and msg.content[0].text == "tok " * 3
    assert msg.usage.output_tokens == 3
    count = await client.messages.count_tokens(
        model="fake-chat", messages=[{"role": "user", "content": "hi"}]
    )
    assert count.input_tokens == 8


async def test_anthropic_messages_streaming(gw: str) -> None:
    client = claude(gw)
    async with client.messages.stream(
        model="fake-chat", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    assert text == "".join(f"tok{i} " for i in range(5))
    assert final.stop_reason == "max_tokens"


async def test_anthropic_errors_in_anthropic_shape(gw: str, http: httpx.AsyncClient) -> None:
    client = claude(gw)
    with pytest.raises(anthropic.NotFoundError) as err:
        await client.messages.create(model="nope", max_tokens=3, messages=[{"role": "user", "content": "x"}])
    assert err.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "The model 'nope' does not exist"},
    }
    for body, status, kind in (
        (b"{broken", 400, "invalid_request_error"),
        (b'{"model": "fake-embed", "max_tokens": 3, "messages": []}', 400, "invalid_request_error"),
        (b'{"model": "empty", "max_tokens": 3, "messages": []}', 503, "overloaded_error"),
    ):
        r = await http.post(f"{gw}/v1/messages", content=body, headers={"content-type": "application/json"})
        assert r.status_code == status, r.text
        assert (
            r.json()["type"] == "error" and r.json()["error"]["type"] == kind and r.json()["error"]["message"]
        )


@pytest.mark.parametrize(
    ("path", "body", "key"),
    [
        ("/v1/rerank", {"model": "fake-embed", "query": "q", "documents": ["a", "b"]}, "results"),
        ("/v2/rerank", {"model": "fake-embed", "query": "q", "documents": ["a"]}, "results"),
        ("/v1/score", {"model": "fake-embed", "text_1": "a", "text_2": "b"}, "data"),
        ("/pooling", {"model": "fake-embed", "input": "a"}, "data"),
        ("/classify", {"model": "fake-embed", "input": "a"}, "data"),
        ("/tokenize", {"model": "fake-chat", "prompt": "one two three"}, "tokens"),
        ("/tokenize", {"model": "fake-embed", "prompt": "one"}, "tokens"),
        ("/detokenize", {"model": "fc", "tokens": [1, 2]}, "prompt"),
    ],
)
async def test_vllm_endpoints_over_http(
    gw: str, http: httpx.AsyncClient, engine: Proc, path: str, body: dict[str, object], key: str
) -> None:
    r = await http.post(f"{gw}{path}", json=body)
    assert r.status_code == 200, r.text
    assert key in r.json()
    assert r.headers["x-request-id"]
    seen = (await http.get(f"{engine.url}/stats")).json()
    assert seen["last_headers"]["x-request-id"] == r.headers["x-request-id"]


async def test_pooling_endpoint_refuses_a_chat_model(gw: str, http: httpx.AsyncClient) -> None:
    r = await http.post(f"{gw}/v1/rerank", json={"model": "fake-chat", "query": "q", "documents": ["a"]})
    assert r.status_code == 400 and "/v1/rerank" in r.json()["error"]["message"]


async def test_audio_multipart_model_is_a_form_field(gw: str, engine: Proc, http: httpx.AsyncClient) -> None:
    client = oai(gw)
    for create in (client.audio.transcriptions.create, client.audio.translations.create):
        out = await create(model="fake-chat", file=("a.wav", io.BytesIO(b"RIFF fake audio")))
        assert out.text == "fake transcript"
    seen = (await http.get(f"{engine.url}/stats")).json()
    assert seen["last_headers"]["content-type"].startswith("multipart/form-data; boundary=")
    assert "RIFF fake audio" in seen["last_body"]
    r = await http.post(
        f"{gw}/v1/audio/transcriptions", files={"file": ("a.wav", b"x")}, data={"model": "nope"}
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = await http.post(f"{gw}/v1/audio/transcriptions", files={"file": ("a.wav", b"x")})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
    r = await http.post(f"{gw}/v1/audio/transcriptions", json={"model": "fake-chat"})
    assert r.status_code == 400 and "multipart" in r.json()["error"]["message"]


async def test_openapi_lists_every_proxied_path(gw: str, http: httpx.AsyncClient) -> None:
    from gateway.endpoints import ROUTES

    paths = (await http.get(f"{gw}/openapi.json")).json()["paths"]
    for api in ROUTES:
        assert api.method.lower() in paths[api.path], api.path
    assert "/v1/models/{model}" in paths


async def test_broken_anthropic_stream_ends_with_an_error_event(gw: str) -> None:
    """A Messages stream that breaks after it started ends with Anthropic's ``event: error``."""
    with pytest.raises(anthropic.APIStatusError) as err:
        async with claude(gw).messages.stream(
            model="broken", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            async for _ in stream.text_stream:
                pass
    assert err.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": err.value.body["error"]["message"]},  # type: ignore[index]
    }
    assert "failed" in err.value.body["error"]["message"]  # type: ignore[index]


async def test_broken_responses_stream_ends_with_an_openai_error_event(gw: str) -> None:
    with pytest.raises(openai.APIError) as err:
        stream = await oai(gw).responses.create(model="broken", input="hi", stream=True)
        async for _ in stream:
            pass
    assert "failed: UpstreamClosed" in err.value.message


async def test_tokens_counted_from_responses_and_messages_usage(gw: str, http: httpx.AsyncClient) -> None:
    """Usage in the Responses and Messages APIs' own names (input/output_tokens) reaches the metrics."""
    await oai(gw).responses.create(model="fake-chat", input="hi", max_output_tokens=3)
    await claude(gw).messages.create(
        model="fake-chat", max_tokens=2, messages=[{"role": "user", "content": "x"}]
    )
    text = (await http.get(f"{gw}/metrics")).text
    assert 'llmgw_completion_tokens_total{model="fake-chat"} 5.0' in text
    assert 'llmgw_prompt_tokens_total{model="fake-chat"} 16.0' in text
    assert 'llmgw_requests_total{model="fake-chat",status="200"} 2.0' in text
