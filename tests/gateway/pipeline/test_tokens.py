"""Token reservations and refunds, as plain arithmetic (gateway/pipeline/tokens.py)."""

from __future__ import annotations

import pytest

from gateway.auth.redis_auth import charged_tokens
from gateway.errors import InvalidRequest
from gateway.pipeline.tokens import DEFAULT_CONTEXT, asked, reserve, unused
from gateway.values import Asked, TokenCost


def test_chat_prefers_max_completion_tokens() -> None:
    assert asked({"max_completion_tokens": 5, "max_tokens": 50}, "chat/completions") == Asked(5, 1)
    assert asked({"max_tokens": 50}, "chat/completions") == Asked(50, 1)


def test_completions_read_max_tokens_only() -> None:
    # vLLM's completions endpoint ignores max_completion_tokens: it may generate up to the context.
    assert asked({"max_completion_tokens": 5}, "completions") == Asked(None, 1)
    assert asked({"max_completion_tokens": 5, "max_tokens": 7}, "completions") == Asked(7, 1)


def test_sequences_are_n_or_best_of() -> None:
    assert asked({"n": 3}, "chat/completions").sequences == 3
    assert asked({"n": 2, "best_of": 5}, "completions").sequences == 5
    assert asked({"n": "x", "best_of": True}, "completions").sequences == 1


def test_embeddings_generate_nothing() -> None:
    assert reserve(40, asked({"input": "x"}, "embeddings"), 512) == TokenCost(40, 0, True)


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "3", (1 << 20) + 1])
def test_bad_limits_are_refused(value: object) -> None:
    with pytest.raises(InvalidRequest):
        asked({"max_tokens": value}, "chat/completions")


def test_explicit_limit_times_sequences() -> None:
    cost = reserve(100, Asked(20, 3), 4096)
    assert cost == TokenCost(100, 60, True) and cost.reserved == 160


def test_without_a_limit_the_context_left_is_reserved() -> None:
    assert reserve(100, Asked(None, 1), 4096) == TokenCost(100, 3996, False)
    assert reserve(100, Asked(None, 2), 4096).output == 2 * 3996
    assert reserve(100, Asked(None, 1), None).output == DEFAULT_CONTEXT - 100
    assert reserve(5000, Asked(None, 1), 4096).output == 0  # the prompt alone fills the context


def test_unused_part_is_refunded_from_usage() -> None:
    cost = TokenCost(100, 900, False)
    assert unused(1000, cost, 80, 20) == 900
    assert unused(1000, cost, 0, 20) == 880  # no prompt in usage: the estimate stands in
    assert unused(1000, cost, 0, 0) == 900  # nothing generated (a failure): only the prompt is kept
    assert unused(50, cost, 80, 20) == 0  # never negative


def test_an_open_ended_request_charges_at_most_the_keys_minute() -> None:
    # No max_tokens with 2,000 tokens of context left and a key of 1,000 tokens per minute: it charges
    # the whole minute (admitted once the minute is empty, refunded from usage), never 2,000 (refused
    # forever: more than the key may ever spend in a minute).
    open_ended = reserve(10, Asked(None, 1), 2010)
    assert open_ended.reserved == 2010 and not open_ended.explicit
    assert charged_tokens(open_ended, 1000) == 1000
    assert charged_tokens(open_ended, 5000) == 2010  # it fits: all of it
    assert charged_tokens(open_ended, 0) == 2010  # no token limit on the key
    # a prompt alone over the minute can never pass: charged as is (400, lower the prompt)
    assert charged_tokens(reserve(1500, Asked(None, 1), 2048), 1000) == 1500
    # an explicit max_tokens is what the client asked for: charged whole (400 when over the minute)
    assert charged_tokens(reserve(10, Asked(1990, 1), 2048), 1000) == 2000
