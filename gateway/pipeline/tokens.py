"""What a request may cost in tokens: reserved before it runs, settled from its usage when it ends.

Rate limits (tokens per minute) and fair share weigh requests by tokens. A request reserves its prompt
estimate (body bytes / 4) plus what it may generate, times the sequences it asks for (``n``, or
``best_of`` when larger):

- its explicit limit: on chat ``max_completion_tokens``, else ``max_tokens``; on completions
  ``max_tokens`` only (vLLM's completions endpoint ignores ``max_completion_tokens``);
- without one, vLLM may generate up to the context length: the context left after the prompt
  estimate (the model's ``max_model_len`` from the fleet, else :data:`DEFAULT_CONTEXT`).

Embeddings generate nothing. When the answer ends, what it did not use is refunded (:func:`unused`),
measured by its ``usage`` (estimates where an answer has none).
"""

from __future__ import annotations

from typing import Any

from gateway.errors import InvalidRequest
from gateway.values import Asked, TokenCost

MAX_TOKENS_CAP = 1 << 20
DEFAULT_CONTEXT = 8192
MAX_SEQUENCES = 1024


def limit_field(payload: dict[str, Any], name: str) -> int | None:
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_TOKENS_CAP:
        raise InvalidRequest(f"{name} must be a positive integer up to {MAX_TOKENS_CAP}", param=name)
    return value


def sequences_field(payload: dict[str, Any]) -> int:
    """max(n, best_of); values vLLM would refuse count as 1 here (vLLM answers them with its 400)."""
    counts = [payload.get("n"), payload.get("best_of")]
    valid = [c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c > 0]
    return min(MAX_SEQUENCES, max(valid, default=1))


# The endpoints that generate, and the fields that bound what they generate, in the order read.
# (vLLM's completions endpoint ignores max_completion_tokens.) Every other endpoint generates nothing.
LIMIT_FIELDS: dict[str, tuple[str, ...]] = {
    "chat/completions": ("max_completion_tokens", "max_tokens"),
    "completions": ("max_tokens",),
    "responses": ("max_output_tokens",),
    "messages": ("max_tokens",),
}


def asked(payload: dict[str, Any], endpoint: str) -> Asked:
    names = LIMIT_FIELDS.get(endpoint)
    if names is None:
        return Asked(max_tokens=0)
    limits = [limit_field(payload, name) for name in names]
    given = next((v for v in limits if v is not None), None)
    return Asked(given, sequences_field(payload))


def prompt_estimate(body: bytes) -> int:
    return len(body) // 4


def reserve(prompt: int, wanted: Asked, max_model_len: int | None) -> TokenCost:
    """The reservation of a request whose prompt is estimated at ``prompt`` tokens."""
    if wanted.max_tokens is not None:
        return TokenCost(prompt, wanted.max_tokens * wanted.sequences, explicit=True)
    left = max(0, (max_model_len or DEFAULT_CONTEXT) - prompt)
    return TokenCost(prompt, left * wanted.sequences, explicit=False)


def used(cost: TokenCost, prompt_tokens: int, completion_tokens: int) -> int:
    """Tokens the request used: the answer's usage; its prompt estimate where usage has no prompt."""
    return (prompt_tokens or cost.prompt) + completion_tokens


def unused(charged: int, cost: TokenCost, prompt_tokens: int, completion_tokens: int) -> int:
    """What to refund of ``charged`` tokens once the answer's usage is known (never negative)."""
    return max(0, charged - used(cost, prompt_tokens, completion_tokens))
