"""The one reader of a request's prompt text, for prefix routing (gateway/routing/prefix/key.py and
chain.py): a chat message as its role, a unit separator, its content (a string, or the text parts of a
list) and a record separator; the leading prompt of a completion request; the text of either, cut to a
byte limit. The readers never raise on odd shapes: they give no text.
"""

from __future__ import annotations

from typing import Any

from llmgw_contract.prefix_chain import message_piece


def content_text(content: Any) -> str:
    """A message's text: the string itself, or its text parts joined; anything else is no text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
        return "".join(texts)
    return ""


def message_text(message: dict[str, Any]) -> str:
    """One chat message as prefix text: its role, a unit separator, its content, a record separator, so
    that the boundaries between messages count (the prefix key and the prefix chain both read it)."""
    role = message.get("role")
    role = role if isinstance(role, str) else ""
    return message_piece(role, content_text(message.get("content")))


def leading_prompt(prompt: Any) -> Any:
    """A completion's prompt, or the first of a list of prompts (strings or token-id lists)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        return prompt[0]
    return prompt


def chat_text(messages: Any, limit: int) -> bytes:
    """Every message in order (role, content), at most ``limit`` bytes of it; non-dicts are skipped."""
    if not isinstance(messages, list):
        return b""
    parts: list[bytes] = []
    size = 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        piece = message_text(message).encode("utf-8", "surrogatepass")
        parts.append(piece)
        size += len(piece)
        if size >= limit:
            break
    return b"".join(parts)[:limit]


def prompt_text(prompt: Any, limit: int) -> bytes:
    """A completion prompt's leading ``limit`` bytes (text, or token ids as ``"1,2,3,"``)."""
    prompt = leading_prompt(prompt)
    if isinstance(prompt, str):
        return prompt[:limit].encode("utf-8", "surrogatepass")[:limit]
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return "".join(f"{t}," for t in prompt[:limit]).encode()[:limit]
    return b""
