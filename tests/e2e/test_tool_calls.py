"""Tool calls on the default fleet's chat models (SmolLM2 and Gemma-3-270M, both served with vLLM's Hermes
tool-call parser and the tool-aware chat templates of fleet.yaml), through nginx and the gateways, with the
openai SDK: each tool_choice (auto, required, none, a named function), streamed and not.

``required`` and a named function are decided by vLLM's guided decoding (the fleet serves both models with
``--tool-strict-level parameter``: the output is constrained to the <tool_call> envelope and each tool's
parameter schema), so those calls are asserted exactly: the tool's name, arguments that parse and carry
the schema's required field. Under ``auto`` the model chooses, and models this small choose poorly:
those tests assert the answer's shape (text, or calls to an offered tool with JSON arguments), not the
model's choice. The gateway passes tool calls through untouched: the same request straight to a replica
and through the gateway gives the same calls, tool-call deltas included."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from llmgw_tools.stack.stack import Stack

pytestmark = pytest.mark.e2e

MODELS = ["smollm2", "gemma3"]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city's name"}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the local time in a timezone",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
    },
}
TOOLS = [WEATHER, TIME]
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]
CHOICES: dict[str, Any] = {
    "auto": "auto",
    "required": "required",
    "none": "none",
    "named": {"type": "function", "function": {"name": "get_time"}},
}


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=180)


def ask(c: openai.OpenAI, model: str, choice: str, stream: bool) -> tuple[str, list[tuple[str, str]], str]:
    """(content, [(name, arguments)], finish_reason), streamed or not; a stream's deltas are added up."""
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": ASK,
        "tools": TOOLS,
        "tool_choice": CHOICES[choice],
        "max_tokens": 64 if choice in ("required", "named") else 24,  # a forced call needs room; text less
        "temperature": 0,
    }
    if not stream:
        r = c.chat.completions.create(**kwargs)
        msg = r.choices[0].message
        calls = [
            (t.function.name, t.function.arguments) for t in msg.tool_calls or [] if t.type == "function"
        ]
        return msg.content or "", calls, r.choices[0].finish_reason
    return add_up(list(c.chat.completions.create(**kwargs, stream=True)))


def add_up(chunks: list[ChatCompletionChunk]) -> tuple[str, list[tuple[str, str]], str]:
    content, names, args, finish, ids = "", {}, {}, "", {}
    for chunk in chunks:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for d in choice.delta.tool_calls or []:
                if d.id:
                    assert ids.setdefault(d.index, d.id) == d.id, "a tool call's id changed mid-stream"
                if d.function and d.function.name:
                    names[d.index] = names.get(d.index, "") + d.function.name
                if d.function and d.function.arguments:
                    args[d.index] = args.get(d.index, "") + d.function.arguments
    assert set(ids) == set(names), f"every streamed tool call has an id: {ids} {names}"
    return content, [(names[i], args.get(i, "")) for i in sorted(names)], finish


def assert_call(call: tuple[str, str], name: str | None) -> None:
    called, raw = call
    assert called in {t["function"]["name"] for t in TOOLS}  # type: ignore[index]
    if name is not None:
        assert called == name
    arguments = json.loads(raw)
    assert isinstance(arguments, dict)
    key = "city" if called == "get_weather" else "tz"
    assert isinstance(arguments[key], str), arguments


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("model", MODELS)
def test_required_calls_a_tool_with_schema_arguments(stack: Stack, model: str, stream: bool) -> None:
    _, calls, finish = ask(client(stack.config.nginx_url), model, "required", stream)
    assert calls, "tool_choice required gave no tool call"
    for call in calls:
        assert_call(call, None)
    assert finish in ("tool_calls", "stop")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("model", MODELS)
def test_named_function_is_the_one_called(stack: Stack, model: str, stream: bool) -> None:
    _, calls, _ = ask(client(stack.config.nginx_url), model, "named", stream)
    assert len(calls) == 1
    assert_call(calls[0], "get_time")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("model", MODELS)
def test_none_answers_in_text_without_calls(stack: Stack, model: str, stream: bool) -> None:
    content, calls, finish = ask(client(stack.config.nginx_url), model, "none", stream)
    assert calls == [] and content.strip() and finish in ("stop", "length")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("model", MODELS)
def test_auto_answers_in_the_right_shape(stack: Stack, model: str, stream: bool) -> None:
    """The model's choice is its own: text, or calls to offered tools with JSON arguments (shape only)."""
    content, calls, finish = ask(client(stack.config.nginx_url), model, "auto", stream)
    assert content.strip() or calls
    for call in calls:
        assert_call(call, None)
    assert finish == ("tool_calls" if calls else finish) and finish in ("tool_calls", "stop", "length")


def test_tool_result_turn_is_answered(stack: Stack) -> None:
    """The second half of an agent's turn: the tool's result goes back and the model answers from it."""
    c = client(stack.config.nginx_url)
    first = c.chat.completions.create(
        model="smollm2", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=64, temperature=0
    )
    call = (first.choices[0].message.tool_calls or [])[0]
    follow: list[Any] = [
        *ASK,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 degrees Celsius."},
    ]
    second = c.chat.completions.create(model="smollm2", messages=follow, tools=TOOLS, max_tokens=32)
    assert second.choices[0].message.content or second.choices[0].message.tool_calls


def test_gateway_passes_tool_calls_through_untouched(stack: Stack) -> None:
    """The same request (greedy, guided) to replica 0 directly and through the gateway: the same calls
    and the same streamed tool-call deltas (ids aside: vLLM makes a fresh one per call)."""
    direct = openai.OpenAI(
        base_url=f"http://127.0.0.1:{stack.fleet.defaults.base_port}/v1",
        api_key=stack.config.vllm_api_key,
        max_retries=0,
        timeout=180,
    )
    gateway = client(stack.config.nginx_url)
    for stream in (False, True):
        a = ask(direct, "smollm2", "named", stream)
        b = ask(gateway, "smollm2", "named", stream)
        assert a == b, (stream, a, b)
