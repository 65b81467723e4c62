"""litellm as a client SDK against the gateway (its OpenAI-compatible provider): completion, stream,
embedding, a named tool call."""

from __future__ import annotations

import json

import litellm
from common import BASE, CHAT, EMBED, EMBED_DIM, WEATHER_SCHEMA, run_all

ARGS = {"api_base": f"{BASE}/v1", "api_key": "unused"}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}


def completion() -> str:
    r = litellm.completion(
        model=f"openai/{CHAT}", messages=[{"role": "user", "content": "Say hello."}], max_tokens=16, **ARGS
    )
    text = r.choices[0].message.content
    assert text and text.strip() and r.usage.completion_tokens > 0, r
    return f"{r.usage.completion_tokens} tokens"


def stream() -> str:
    chunks = litellm.completion(
        model=f"openai/{CHAT}",
        messages=[{"role": "user", "content": "Count from one to five."}],
        max_tokens=16,
        stream=True,
        **ARGS,
    )
    parts = [c.choices[0].delta.content or "" for c in chunks]
    assert len(parts) > 2 and "".join(parts).strip(), parts
    return f"{len(parts)} chunks"


def embedding() -> str:
    r = litellm.embedding(model=f"openai/{EMBED}", input=["the cat sat", "on the mat"], **ARGS)
    dims = [len(d["embedding"]) for d in r.data]
    assert dims == [EMBED_DIM, EMBED_DIM], dims
    return f"2 embeddings of {EMBED_DIM}"


def tools() -> str:
    r = litellm.completion(
        model=f"openai/{CHAT}",
        messages=[{"role": "user", "content": "What is the weather like in Paris?"}],
        tools=[TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=64,
        **ARGS,
    )
    call = r.choices[0].message.tool_calls[0]
    args = json.loads(call.function.arguments)
    assert call.function.name == "get_weather" and isinstance(args["city"], str), call
    return f"get_weather({args})"


if __name__ == "__main__":
    run_all(
        "litellm",
        {"completion": completion, "stream": stream, "embedding": embedding, "tool call": tools},
        short=("completion", "tool call"),
    )
