"""The FAKE ENGINE's prefix cache: a model of vLLM's automatic prefix caching, for routing benchmarks that
run without a model (bench/agentic.py). A prompt is cut into blocks of ``block_chars`` characters, each
named by a hash chained over the blocks before it (as vLLM's block hashes are); the leading blocks found
in the cache are hits, the rest are prefilled and cached. The cache holds ``capacity`` blocks, least
recently used evicted first. The engine reports the counts under vLLM's metric names and waits for the
blocks it prefills, so time to first token grows with what the cache missed."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

BLOCK_TOKENS = 16
"""The tokens one block stands for in the reported counters (vLLM counts prefix-cache queries in tokens)."""


def prompt_text(req: dict[str, Any]) -> str:
    """What the engine would prefill: the chat messages in order (role and content), else the prompt."""
    messages = req.get("messages")
    if isinstance(messages, list):
        return "".join(f"<{m.get('role')}>{m.get('content') or ''}" for m in messages if isinstance(m, dict))
    prompt = req.get("prompt", "")
    return prompt if isinstance(prompt, str) else str(prompt)


class PrefixCache:
    """Chained block hashes in an LRU of ``capacity`` blocks; counts queried and hit blocks."""

    def __init__(self, capacity: int, block_chars: int = 64) -> None:
        self.capacity, self.block_chars = capacity, block_chars
        self.blocks: OrderedDict[bytes, None] = OrderedDict()
        self.queried = 0
        self.hit = 0

    def chain(self, text: str) -> list[bytes]:
        hashes, parent = [], b""
        full = len(text) - len(text) % self.block_chars  # only full blocks are cached, as in vLLM
        for start in range(0, full, self.block_chars):
            parent = hashlib.blake2b(
                parent + text[start : start + self.block_chars].encode(), digest_size=8
            ).digest()
            hashes.append(parent)
        return hashes

    def admit(self, text: str) -> tuple[int, int]:
        """(blocks, leading blocks already cached) of one prompt, which is cached from now on."""
        chain = self.chain(text)
        hits = 0
        while hits < len(chain) and chain[hits] in self.blocks:
            hits += 1
        for h in chain:
            self.blocks[h] = None
            self.blocks.move_to_end(h)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)
        self.queried += len(chain)
        self.hit += hits
        return len(chain), hits

    def metrics(self, model: str) -> str:
        """vLLM's prefix-cache counters (in tokens: blocks × BLOCK_TOKENS)."""
        return (
            f'vllm:prefix_cache_queries_total{{model_name="{model}"}} {self.queried * BLOCK_TOKENS}\n'
            f'vllm:prefix_cache_hits_total{{model_name="{model}"}} {self.hit * BLOCK_TOKENS}\n'
        )
