"""The whole stack for real, through nginx, with the official openai SDK as the client."""

from __future__ import annotations

import httpx
import openai
import pytest

pytestmark = pytest.mark.e2e
CHAT_MODELS = ["smollm2", "gemma3"]


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)


def test_chat_sync_smollm2(base_url: str) -> None:
    out = client(base_url).chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=16,
        temperature=0,
    )
    assert "Paris" in (out.choices[0].message.content or "")
    assert out.usage is not None and out.usage.completion_tokens > 0


async def test_chat_async_both_models(base_url: str) -> None:
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120) as c:
        for model in ["smollm2-135m-instruct", "gemma-3-270m"]:
            out = await c.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0
            )
            assert out.choices[0].message.content
            assert out.model == model


@pytest.mark.parametrize("model", CHAT_MODELS)
def test_streaming_chat(base_url: str, model: str) -> None:
    stream = client(base_url).chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Count to five."}],
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    usage = chunks[-1].usage
    assert usage is not None and 1 <= usage.completion_tokens <= 12  # the model may stop before max_tokens


@pytest.mark.parametrize("model", CHAT_MODELS)
def test_completions(base_url: str, model: str) -> None:
    out = client(base_url).completions.create(
        model=model, prompt="Once upon a time", max_tokens=8, temperature=0
    )
    assert out.choices[0].text


def test_gemma_bos_fix_no_repetition_loop(base_url: str) -> None:
    out = client(base_url).completions.create(
        model="gemma3", prompt="The capital of France is", max_tokens=16, temperature=0
    )
    words = out.choices[0].text.split()
    assert len(words) >= 4
    assert len(set(words)) > len(words) // 2, f"degenerate output: {out.choices[0].text!r}"


def test_embeddings(base_url: str) -> None:
    out = client(base_url).embeddings.create(model="minilm", input=["hello world", "goodbye"])
    assert [len(d.embedding) for d in out.data] == [384, 384]


def test_models_list(base_url: str) -> None:
    ids = {m.id for m in client(base_url).models.list()}
    assert {"smollm2-135m-instruct", "smollm2", "gemma-3-270m", "gemma3", "all-minilm-l6-v2", "minilm"} <= ids


def test_unknown_model_is_404(base_url: str) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client(base_url).chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    assert err.value.code == "model_not_found"


def test_malformed_body_is_400(base_url: str) -> None:
    r = httpx.post(
        f"{base_url}/chat/completions",
        content=b'{"model": "smollm2", "messages": ',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_vllm_client_error_passes_through_untouched(base_url: str) -> None:
    with pytest.raises(openai.BadRequestError):
        client(base_url).chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "x"}], max_tokens=100000
        )
