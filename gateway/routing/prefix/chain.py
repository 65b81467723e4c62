"""The prefix chain of a request: its prompt cut into chunks, each named by a hash of the whole prefix.

The prompt text is what the model reads first: for a chat request every message in order, each as its
role, a unit separator, its content (a string, or the text parts of a list) and a record separator; for
a completion the prompt (a string, the first of a list of strings, or token ids written as decimal numbers
each followed by a comma). The text, encoded as UTF-8, is cut into ``chunk_bytes`` pieces (the last one may
be shorter) and at most ``max_chunks`` of them are kept. Key *i* is the 64-bit BLAKE2b hash of key *i - 1*
and chunk *i*, written as 16 hex digits, so a key names its whole prefix: a conversation's later turn
repeats its earlier turn's text, hence its keys, and a shared system prompt gives every request that starts
with it the same first keys. The functions never raise: input of the wrong shape gives no keys.
"""

from __future__ import annotations

from typing import Any

from gateway.routing.prefix.prompt_text import chat_text, prompt_text
from llmgw_contract.prefix_chain import chain_keys

__all__ = ["chain_keys", "request_chain"]


def request_chain(payload: dict[str, Any], chunk_bytes: int, max_chunks: int) -> tuple[str, ...]:
    """The prefix chain of a parsed request body (chat ``messages``, else ``prompt`` or ``input``)."""
    try:
        limit = chunk_bytes * max_chunks
        messages = payload.get("messages")
        if isinstance(messages, list):
            text = chat_text(messages, limit)
        else:
            text = prompt_text(payload.get("prompt", payload.get("input")), limit)
        return chain_keys(text, chunk_bytes, max_chunks)
    except Exception:  # the chain is a routing hint: odd input must never fail the request
        return ()
