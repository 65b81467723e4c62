"""The OpenAI Agents SDK against the gateway (Chat Completions API): a plain run, and a run whose agent
calls a function tool (tool_choice required, stop at the tool's result: the tool ran with the
arguments the model gave)."""

from __future__ import annotations

from agents import (
    Agent,
    ModelSettings,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from common import BASE, CHAT, run_all
from openai import AsyncOpenAI

CALLS: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    CALLS.append(city)
    return f"Sunny, 21 degrees Celsius in {city}."


def setup() -> None:
    set_default_openai_client(AsyncOpenAI(base_url=f"{BASE}/v1", api_key="unused"), use_for_tracing=False)
    set_default_openai_api("chat_completions")
    set_tracing_disabled(True)


def plain_run() -> str:
    agent = Agent(
        name="helper",
        instructions="Answer in one short sentence.",
        model=CHAT,
        model_settings=ModelSettings(max_tokens=24, temperature=0),
    )
    result = Runner.run_sync(agent, "What is the capital of France?")
    assert isinstance(result.final_output, str) and result.final_output.strip(), result
    return f"final output of {len(result.final_output)} characters"


def function_tool_run() -> str:
    agent = Agent(
        name="weather",
        instructions="Use the tools to answer.",
        model=CHAT,
        tools=[get_weather],
        model_settings=ModelSettings(tool_choice="required", max_tokens=64, temperature=0),
        tool_use_behavior="stop_on_first_tool",
    )
    result = Runner.run_sync(agent, "What is the weather like in Paris?", max_turns=3)
    assert CALLS, "the function tool never ran"
    assert result.final_output == f"Sunny, 21 degrees Celsius in {CALLS[-1]}.", result.final_output
    return f"get_weather(city={CALLS[-1]!r}) ran; its result is the final output"


if __name__ == "__main__":
    setup()
    run_all("openai-agents", {"run": plain_run, "function tool": function_tool_run}, short=("function tool",))
