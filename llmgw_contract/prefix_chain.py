"""The prefix chain's text and keys, written once for the gateway (which keys each request) and the
managing agents (which key what each replica's KV cache holds, from vLLM's KV events).

A prompt's *prefix text* is what the model reads first: for a chat request every message in order, each as
its role, :data:`ROLE_END`, its content and :data:`MSG_END`; for a completion the prompt itself. The text,
encoded as UTF-8, is cut into ``chunk_bytes`` pieces and at most ``max_chunks`` of them are kept. Key *i* is
the 64-bit BLAKE2b hash of key *i - 1* and chunk *i*, as 16 hex digits, so a key names its whole prefix.
"""

from __future__ import annotations

from hashlib import blake2b

ROLE_END = "\x1f"  # unit separator: between a message's role and its content
MSG_END = "\x1e"  # record separator: after each message
_PERSON = b"gw-chain-v1"


def chain_keys(text: bytes, chunk_bytes: int, max_chunks: int, full_only: bool = False) -> tuple[str, ...]:
    """The chained keys of ``text`` cut into ``chunk_bytes`` pieces, at most ``max_chunks`` of them;
    ``full_only``: only whole chunks (a replica's cache holds a prefix's whole chunks, never the tail that a
    longer prompt would continue)."""
    if chunk_bytes <= 0 or max_chunks <= 0:
        return ()
    end = min(len(text), chunk_bytes * max_chunks)
    if full_only:
        end -= end % chunk_bytes
    keys: list[str] = []
    prev = b""
    for start in range(0, end, chunk_bytes):
        h = blake2b(prev, digest_size=8, person=_PERSON)
        h.update(text[start : start + chunk_bytes])
        prev = h.digest()
        keys.append(prev.hex())
    return tuple(keys)


def message_piece(role: str, content: str) -> str:
    """One chat message as prefix text."""
    return role + ROLE_END + content + MSG_END
