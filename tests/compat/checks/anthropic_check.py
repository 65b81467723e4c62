"""The anthropic SDK against the gateway's /v1/messages: messages, stream, count_tokens, tool use."""

from __future__ import annotations

import anthropic
from common import BASE, CHAT, WEATHER_SCHEMA, run_all

ASK = [{"role": "user", "content": "What is the capital of France?"}]


def client() -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=BASE, api_key="unused", max_retries=0, timeout=120)


def messages() -> str:
    msg = client().messages.create(model=CHAT, max_tokens=16, messages=ASK)
    assert msg.content[0].type == "text" and msg.content[0].text.strip() and msg.usage.output_tokens > 0
    return f"{msg.usage.output_tokens} output tokens, stop_reason {msg.stop_reason}"


def stream() -> str:
    with client().messages.stream(model=CHAT, max_tokens=16, messages=ASK) as s:
        parts = list(s.text_stream)
        final = s.get_final_message()
    assert len(parts) > 1 and "".join(parts) == final.content[0].text, parts
    return f"{len(parts)} text deltas adding up to the final message"


def count_tokens() -> str:
    n = client().messages.count_tokens(model=CHAT, messages=ASK).input_tokens
    assert n > 5, n
    return f"{n} input tokens"


def tool_use() -> str:
    msg = client().messages.create(
        model=CHAT,
        max_tokens=64,
        messages=[{"role": "user", "content": "What is the weather like in Paris?"}],
        tools=[{"name": "get_weather", "description": "Get the weather", "input_schema": WEATHER_SCHEMA}],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert uses and uses[0].name == "get_weather" and isinstance(uses[0].input.get("city"), str), msg
    return f"tool_use get_weather({uses[0].input}), stop_reason {msg.stop_reason}"


if __name__ == "__main__":
    run_all(
        "anthropic",
        {"messages": messages, "stream": stream, "count_tokens": count_tokens, "tool use": tool_use},
        short=("count_tokens", "tool use"),
    )
