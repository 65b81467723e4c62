"""The rest of the inference API against real vLLM CPU replicas, through nginx and the two gateways:
the Responses API (a follow-up by previous_response_id through the other gateway reaches the replica that
stored the first answer), Anthropic's Messages API with the `anthropic` SDK, and vLLM's own tokenize,
pooling, score and rerank endpoints over plain HTTP."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from llmgw_tools.stack.stack import Stack

pytestmark = pytest.mark.e2e


def gateways(stack: Stack) -> list[str]:
    return [f"http://{stack.config.host}:{p}" for p in stack.config.gateway_ports]


def oai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def test_responses_follow_up_across_gateways(stack: Stack) -> None:
    g1, g2 = (oai(u) for u in gateways(stack))
    first = g1.responses.create(model="smollm2", input="What is the capital of France?", max_output_tokens=16)
    assert first.id.startswith("resp_") and first.output_text.strip()
    for _ in range(3):  # two replicas: without response affinity some follow-ups would miss the store
        follow = g2.responses.create(
            model="smollm2", input="And of Italy?", previous_response_id=first.id, max_output_tokens=8
        )
        assert follow.output_text.strip() and follow.previous_response_id == first.id
    assert g2.responses.retrieve(first.id).id == first.id


def test_responses_streaming(stack: Stack) -> None:
    stream = oai(stack.config.nginx_url).responses.create(
        model="smollm2", input="Say hello.", max_output_tokens=8, stream=True
    )
    kinds = [event.type for event in stream]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds


def test_anthropic_messages(stack: Stack) -> None:
    client = anthropic.Anthropic(
        base_url=stack.config.nginx_url, api_key="unused", max_retries=0, timeout=120
    )
    messages: list[anthropic.types.MessageParam] = [
        {"role": "user", "content": "What is the capital of France?"}
    ]
    msg = client.messages.create(model="smollm2", max_tokens=16, messages=messages)
    assert msg.content and msg.content[0].type == "text" and msg.content[0].text.strip()
    with client.messages.stream(model="smollm2", max_tokens=8, messages=messages) as stream:
        assert "".join(stream.text_stream).strip()
    assert client.messages.count_tokens(model="smollm2", messages=messages).input_tokens > 0
    with pytest.raises(anthropic.NotFoundError) as err:
        client.messages.create(model="nope", max_tokens=4, messages=messages)
    assert err.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


def test_tokenize_round_trip(stack: Stack) -> None:
    url = stack.config.nginx_url
    tokens = httpx.post(
        f"{url}/tokenize", json={"model": "smollm2", "prompt": "Hello world"}, timeout=60
    ).json()
    assert tokens["count"] == len(tokens["tokens"]) > 0
    text = httpx.post(f"{url}/detokenize", json={"model": "smollm2", "tokens": tokens["tokens"]}, timeout=60)
    assert "Hello world" in text.json()["prompt"]


def test_pooling_score_and_rerank_with_the_embedding_model(stack: Stack) -> None:
    url = stack.config.nginx_url
    pooled = httpx.post(f"{url}/pooling", json={"model": "minilm", "input": "hello world"}, timeout=60)
    assert pooled.status_code == 200, pooled.text
    assert pooled.json()["data"][0]["data"]
    score = httpx.post(
        f"{url}/v1/score", json={"model": "minilm", "text_1": "a cat", "text_2": "a kitten"}, timeout=60
    )
    assert score.status_code == 200, score.text
    assert 0 < score.json()["data"][0]["score"] <= 1
    rerank = httpx.post(
        f"{url}/v1/rerank",
        json={"model": "minilm", "query": "pets", "documents": ["a cat", "stock prices"]},
        timeout=60,
    )
    assert rerank.status_code == 200, rerank.text
    assert rerank.json()["results"][0]["document"]["text"] == "a cat"
