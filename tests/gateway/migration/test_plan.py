"""Which requests may move, and the continuation request built from the original."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.migration.plan import continuation, derived_seed, first_request, why_not

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def test_plain_chat_and_completion_move() -> None:
    assert why_not(CHAT, "chat/completions") == ""
    sampled = {**CHAT, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "seed": 3, "logit_bias": {"5": 1}}
    assert why_not(sampled, "chat/completions") == ""
    assert why_not({"model": "m", "prompt": "x", "max_tokens": 5}, "completions") == ""


@pytest.mark.parametrize(
    ("extra", "path", "reason"),
    [
        ({}, "responses", "responses API"),
        ({}, "messages", "messages API"),
        ({"n": 2}, "chat/completions", "n > 1"),
        ({"use_beam_search": True}, "completions", "beam search"),
        ({"logprobs": True, "top_logprobs": 2}, "chat/completions", "logprobs"),
        ({"logprobs": 0}, "completions", "logprobs"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "chat/completions", "tool calls"),
        ({"include_reasoning": True}, "chat/completions", "reasoning"),
        ({"response_format": {"type": "json_object"}}, "chat/completions", "structured output"),
        ({"stop": ["\n"]}, "chat/completions", "stop strings"),
        ({"presence_penalty": 0.5}, "chat/completions", "presence penalty"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "chat/completions",
            "multimodal",
        ),
        ({"frobnicate": 1}, "chat/completions", "frobnicate"),
    ],
)
def test_what_cannot_move_says_why(extra: dict[str, Any], path: str, reason: str) -> None:
    assert reason in why_not({**CHAT, **extra}, path)


def test_lora_adapter_does_not_move() -> None:
    assert "LoRA" in why_not(CHAT, "chat/completions", adapter=True)


def test_tools_with_tool_choice_none_move() -> None:
    payload = {**CHAT, "tools": [{"type": "function"}], "tool_choice": "none"}
    assert why_not(payload, "chat/completions") == ""


def test_first_request_asks_for_token_ids() -> None:
    assert orjson.loads(first_request(CHAT)) == {**CHAT, "return_token_ids": True}


def test_continuation_keeps_sampling_and_reduces_limits() -> None:
    payload = {
        **CHAT, "temperature": 0.8, "top_p": 0.95, "repetition_penalty": 1.1, "logit_bias": {"7": -5},
        "max_completion_tokens": 50, "min_tokens": 10, "seed": 42, "stop_token_ids": [2],
        "stream_options": {"include_usage": True},
    }  # fmt: skip
    body = orjson.loads(continuation(payload, "served", [1, 2, 3], [10, 11, 12, 13], usage=True))
    assert body == {
        "model": "served", "prompt": [1, 2, 3, 10, 11, 12, 13], "stream": True, "return_token_ids": True,
        "temperature": 0.8, "top_p": 0.95, "repetition_penalty": 1.1, "logit_bias": {"7": -5},
        "stop_token_ids": [2], "max_tokens": 46, "min_tokens": 6, "seed": derived_seed(42, 4),
        "stream_options": {"include_usage": True},
    }  # fmt: skip


def test_a_chat_without_limit_continues_without_one() -> None:
    # max_tokens null: the continuation goes to /v1/completions, whose default (16) would cut it short
    body = orjson.loads(continuation(CHAT, "m", [1], [2], usage=False))
    assert body["max_tokens"] is None and "seed" not in body and "stream_options" not in body


def test_a_completion_keeps_vllms_default_limit() -> None:
    completion = {"model": "m", "prompt": "hi"}
    assert orjson.loads(continuation(completion, "m", [1], [2, 3], usage=False))["max_tokens"] == 14
    asked = {**completion, "max_tokens": None, "max_completion_tokens": 5}  # ignored by vLLM's completions
    assert orjson.loads(continuation(asked, "m", [1], [2, 3], usage=False))["max_tokens"] is None


def test_derived_seed_is_documented_and_differs_per_offset() -> None:
    assert derived_seed(42, 4) == (42 * 1_000_003 + 4) % (2**31 - 1)
    assert len({derived_seed(42, k) for k in range(100)}) == 100
