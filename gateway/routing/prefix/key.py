"""The prefix key of a request: the leading prompt text that prefix affinity hashes.

Built from the parsed JSON body. Requests that share their key share the start of their prompt, which
vLLM's prefix cache can reuse on the replica that already served it. The functions never raise: any
input of the wrong shape gives ``b""``, which routes by load alone.
"""

from __future__ import annotations

from typing import Any

from gateway.routing.prefix.prompt_text import leading_prompt, message_text


def _encode(text: str, max_chars: int) -> bytes:
    return text[:max_chars].encode("utf-8", "surrogatepass")


def _valid_limit(max_chars: Any) -> bool:
    return isinstance(max_chars, int) and not isinstance(max_chars, bool) and max_chars > 0


def chat_prefix_key(messages: list[Any], max_chars: int) -> bytes:
    """The system prompt(s) and the first user turn of a chat request, at most ``max_chars`` characters.

    Each message up to and including the first ``"user"`` message contributes its role and its content
    (a string, or the text parts of a list of parts), with separators so that the boundaries between
    messages count. Non-dict messages are skipped; with no user message, all messages are taken. The
    text is cut to ``max_chars`` characters and encoded as UTF-8 (lone surrogates passed through).
    """
    try:
        if not isinstance(messages, list) or not _valid_limit(max_chars):
            return b""
        pieces: list[str] = []
        size = 0
        for message in messages:
            if not isinstance(message, dict):
                continue
            piece = message_text(message)
            pieces.append(piece)
            size += len(piece)
            if message.get("role") == "user" or size >= max_chars:
                break
        return _encode("".join(pieces), max_chars)
    except Exception:  # the key is a routing hint: odd input must never fail the request
        return b""


def prompt_prefix_key(prompt: Any, max_chars: int) -> bytes:
    """The leading ``max_chars`` characters of a completion request's prompt.

    ``prompt`` may be a string, a list whose first element is a string, a list of token ids, or a list
    whose first element is a list of token ids; token ids give the ``repr`` of their leading ids (each
    id takes at least one character, so ``max_chars`` ids are always enough). Anything else gives ``b""``.
    """
    try:
        if not _valid_limit(max_chars):
            return b""
        prompt = leading_prompt(prompt)
        if isinstance(prompt, str):
            return _encode(prompt, max_chars)
        if isinstance(prompt, list) and prompt:
            head = prompt[:max_chars]
            if all(isinstance(t, int) and not isinstance(t, bool) for t in head):
                return _encode(repr(head), max_chars)
        return b""
    except Exception:  # the key is a routing hint: odd input must never fail the request
        return b""
