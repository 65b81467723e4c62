"""Tools offered to a model served without a tool-call parser: a clear 400 at the gateway that names the
fleet-file field to set (engine.tool_call_parser), in the shape of the API called, and the replica never
sees the request; tool_choice none still goes through. A real gateway (real Redis) in front of the FAKE
ENGINE, with the openai and anthropic SDKs as clients."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import Proc, start_fake_engine

FLEET = fleet_yaml(
    [
        {"name": "plain", "source": {"path": "/nonexistent"}},
        {"name": "tooled", "source": {"path": "/nonexistent"}, "engine": {"tool_call_parser": "hermes"}},
    ]
)
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"), "--tokens", "3")
    yield proc
    proc.stop()


@pytest.fixture
async def gw(tmp_path: Path, redis_url: str, engine: Proc) -> AsyncIterator[str]:
    prefix = f"tc{uuid.uuid4().hex[:8]}"
    for name in ("plain", "tooled"):
        await register(redis_url, prefix, name, engine.url, f"{name}-0")
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix) as url:
        yield url


async def served(engine: Proc) -> int:
    async with httpx.AsyncClient(timeout=10) as http:
        count: int = (await http.get(f"{engine.url}/stats")).json()["served"]
        return count


@pytest.mark.parametrize(
    "choice",
    [None, "auto", "required", {"type": "function", "function": {"name": "get_weather"}}],
    ids=["absent", "auto", "required", "named"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_tools_to_a_model_without_parser_is_a_400_naming_the_field(
    gw: str, engine: Proc, choice: Any, stream: bool
) -> None:
    client = openai.AsyncOpenAI(base_url=f"{gw}/v1", api_key="unused", max_retries=0)
    extra = {} if choice is None else {"tool_choice": choice}
    before = await served(engine)
    with pytest.raises(openai.BadRequestError) as err:
        await client.chat.completions.create(
            model="plain",
            messages=ASK,
            tools=[TOOL],
            stream=stream,
            **extra,  # type: ignore[call-overload]
        )
    assert err.value.status_code == 400
    body = err.value.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error" and body["param"] == "tools"
    assert "engine.tool_call_parser" in body["message"] and "'plain'" in body["message"]
    assert await served(engine) == before


async def test_tool_choice_none_and_a_model_with_parser_go_through(gw: str, engine: Proc) -> None:
    client = openai.AsyncOpenAI(base_url=f"{gw}/v1", api_key="unused", max_retries=0)
    before = await served(engine)
    none = await client.chat.completions.create(model="plain", messages=ASK, tools=[TOOL], tool_choice="none")
    auto = await client.chat.completions.create(model="tooled", messages=ASK, tools=[TOOL])
    assert none.choices[0].message.content and auto.choices[0].message.content
    assert await served(engine) == before + 2
    async with httpx.AsyncClient(timeout=10) as http:
        forwarded = json.loads((await http.get(f"{engine.url}/stats")).json()["last_body"])
    assert forwarded["tools"] == [TOOL]  # passed on untouched


async def test_anthropic_tools_get_the_400_in_anthropic_shape(gw: str, engine: Proc) -> None:
    client = anthropic.AsyncAnthropic(base_url=gw, api_key="unused", max_retries=0)
    tool = {"name": "get_weather", "input_schema": TOOL["function"]["parameters"]}  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as err:
        await client.messages.create(model="plain", max_tokens=8, messages=ASK, tools=[tool])  # type: ignore[list-item]
    assert isinstance(err.value.body, dict) and err.value.body["type"] == "error"
    assert "engine.tool_call_parser" in err.value.body["error"]["message"]
    ok = await client.messages.create(
        model="plain",
        max_tokens=8,
        messages=ASK,
        tools=[tool],
        tool_choice={"type": "none"},  # type: ignore[list-item]
    )
    assert ok.content
