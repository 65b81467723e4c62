"""Which requests may move, and the continuation request built from the original.

The continuation goes to ``/v1/completions`` with ``prompt`` = the prompt's token ids + the ids generated
up to the clean seam: vLLM takes a prompt of token ids as is (no template, no special tokens added), so
the model sees exactly the sequence it was extending. Every sampling parameter is kept; ``max_tokens``
(and ``min_tokens``) shrink by what was generated; a client's ``seed`` becomes :func:`derived_seed`
(the same seed would replay the random draws of the start). What cannot continue exactly is refused by
:func:`why_not` with the reason; such a request keeps today's end (the SSE error event).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

MOVABLE_PATHS = frozenset({"chat/completions", "completions"})
# Parameters copied to the continuation as they are: their meaning does not depend on where it starts.
KEPT = frozenset(
    {
        "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "stop_token_ids", "ignore_eos",
        "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output",
        "logit_bias", "allowed_token_ids", "bad_words", "user", "priority", "cache_salt", "vllm_xargs",
        "return_token_ids",
    }
)  # fmt: skip
# Parameters of the original request that the continuation does not need: the prompt's shape (it is
# now token ids), the stream's options (the gateway sets them) and what is rebuilt below.
DROPPED = frozenset(
    {
        "model", "messages", "prompt", "stream", "stream_options", "max_tokens", "max_completion_tokens",
        "min_tokens", "seed", "chat_template", "chat_template_kwargs", "add_generation_prompt",
        "continue_final_message", "add_special_tokens", "documents", "request_id", "echo", "n",
        "tool_choice", "parallel_tool_calls", "stop", "frequency_penalty", "presence_penalty",
        "logprobs", "top_logprobs", "response_format", "tools", "best_of", "use_beam_search",
        "include_reasoning", "return_prompt_text", "reasoning_effort", "metadata", "store",
    }
)  # fmt: skip


STRUCTURED = ("structured_outputs", "guided_json", "guided_regex")
SEED_MULTIPLIER = 1_000_003
SEED_MODULUS = 2**31 - 1


def derived_seed(seed: int, offset: int) -> int:
    """The continuation's seed: ``(seed * 1000003 + offset) mod (2**31 - 1)``, where ``offset`` is the
    number of generated tokens the continuation starts after (so two seams never share a seed)."""
    return (seed * SEED_MULTIPLIER + offset) % SEED_MODULUS


def _multimodal(messages: object) -> bool:
    if not isinstance(messages, list):
        return False
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            not isinstance(p, dict) or p.get("type") != "text" for p in content
        ):
            return True
    return False


def _numbers(payload: dict[str, Any], *names: str) -> list[str]:
    return [n for n in names if payload.get(n) not in (None, 0, 0.0)]


def why_not(payload: dict[str, Any], path: str, adapter: bool = False) -> str:
    """The reason the request cannot move, or ``""`` when it can continue token-exact. Only the checks
    of the parameters the request names run (a plain request: its messages or prompt)."""
    if path not in MOVABLE_PATHS:
        return f"the {path} API streams its own events"
    if adapter:
        return "a LoRA adapter is not migrated"
    for _, failed, reason in _checks_of(payload):
        if failed(payload):
            return reason
    if KNOWN.issuperset(payload):
        return ""
    unknown = sorted(payload.keys() - KNOWN)
    return f"parameters not known to migrate: {', '.join(unknown)}"


def _checks_of(payload: dict[str, Any]) -> list[Check]:
    """The checks that read a parameter the request names, in :data:`CHECKS`' order."""
    present = CHECKED.intersection(payload)
    if len(present) <= 1:  # (a plain request: its messages or prompt)
        return CHECKS_OF[next(iter(present))] if present else []
    return [check for check in CHECKS if not check[0].isdisjoint(present)]


def _response_format(payload: dict[str, Any]) -> bool:
    fmt = payload.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        return True
    return any(payload.get(k) is not None for k in STRUCTURED)


def _many_prompts(prompt: object) -> bool:
    return isinstance(prompt, list) and bool(prompt) and not isinstance(prompt[0], int)


def _continuous_usage(payload: dict[str, Any]) -> bool:
    options = payload.get("stream_options")
    return isinstance(options, dict) and bool(options.get("continuous_usage_stats"))


def wants_usage(payload: dict[str, Any]) -> bool:
    options = payload.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def first_request(payload: dict[str, Any]) -> bytes:
    """The original request as sent to the replica: the client's, asking for token ids too."""
    return orjson.dumps({**payload, "return_token_ids": True})


def continuation(
    payload: dict[str, Any], model: str, prompt_ids: list[int], ids: list[int], usage: bool
) -> bytes:
    """The ``/v1/completions`` body that continues ``payload`` after ``ids`` (the clean seam)."""
    body: dict[str, Any] = {k: v for k, v in payload.items() if k in KEPT}
    body.update(model=model, prompt=prompt_ids + ids, stream=True, return_token_ids=True)
    limit = _limit(payload)
    # no limit: null, as the original's (/v1/completions' own default, 16 tokens, would cut a chat short)
    body["max_tokens"] = max(1, int(limit) - len(ids)) if limit is not None else None
    if payload.get("min_tokens"):
        body["min_tokens"] = max(0, int(payload["min_tokens"]) - len(ids))
    if payload.get("seed") is not None:
        body["seed"] = derived_seed(int(payload["seed"]), len(ids))
    if usage:
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


COMPLETIONS_MAX_TOKENS = 16
"""vLLM's ``max_tokens`` of a completion that gives none (``CompletionRequest``); a chat's is null (up to
the context), and the completions endpoint ignores ``max_completion_tokens``."""


def _limit(payload: dict[str, Any]) -> int | None:
    """The original's limit on generated tokens, as vLLM reads it (None: up to the context)."""
    if "messages" in payload:
        limit = payload.get("max_completion_tokens") or payload.get("max_tokens")
        return int(limit) if limit is not None else None
    limit = payload.get("max_tokens", COMPLETIONS_MAX_TOKENS)
    return int(limit) if limit is not None else None


def _logprobs(payload: dict[str, Any]) -> bool:
    asked = payload.get("logprobs")
    return (asked is not None and asked is not False) or bool(payload.get("top_logprobs"))


Check = tuple[frozenset[str], Callable[[dict[str, Any]], bool], str]
CHECKS: tuple[Check, ...] = (
    (frozenset({"n", "best_of"}), lambda p: (p.get("n") or 1) != 1 or (p.get("best_of") or 1) != 1, "n > 1"),
    (frozenset({"use_beam_search"}), lambda p: bool(p.get("use_beam_search")), "beam search"),
    (frozenset({"logprobs", "top_logprobs"}), _logprobs, "logprobs"),
    (frozenset({"prompt_logprobs"}), lambda p: p.get("prompt_logprobs") is not None, "prompt logprobs"),
    (frozenset({"echo"}), lambda p: bool(p.get("echo")), "echo"),
    (frozenset({"tools"}), lambda p: bool(p.get("tools")) and p.get("tool_choice") != "none", "tool calls"),
    (frozenset({"include_reasoning"}), lambda p: bool(p.get("include_reasoning")), "reasoning"),
    (frozenset({"response_format", *STRUCTURED}), _response_format, "structured output"),
    (
        frozenset({"stop"}),
        lambda p: bool(p.get("stop")),
        "stop strings (their held-back text spans the seam)",
    ),
    (
        frozenset({"frequency_penalty", "presence_penalty"}),
        lambda p: bool(_numbers(p, "frequency_penalty", "presence_penalty")),
        "frequency/presence penalty",
    ),
    (frozenset({"messages"}), lambda p: _multimodal(p.get("messages")), "multimodal input"),
    (frozenset({"prompt"}), lambda p: _many_prompts(p.get("prompt")), "several prompts"),
    (frozenset({"stream_options"}), _continuous_usage, "continuous usage stats"),
)
"""What stops a request from moving, in order: the parameters each check reads, the check, the reason."""
CHECKED = frozenset().union(*(keys for keys, _, _ in CHECKS))
CHECKS_OF = {key: [check for check in CHECKS if key in check[0]] for key in CHECKED}
"""The checks that read each parameter."""
KNOWN = KEPT | DROPPED
