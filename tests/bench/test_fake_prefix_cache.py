"""The FAKE ENGINE's prefix-cache model, without I/O: chained block hashes, leading hits only, LRU
eviction at capacity, vLLM's counters in tokens."""

from __future__ import annotations

from testing.fake_prefix_cache import BLOCK_TOKENS, PrefixCache, prompt_text


def test_only_the_leading_cached_blocks_hit() -> None:
    cache = PrefixCache(capacity=100, block_chars=4)
    assert cache.admit("aaaabbbbcc") == (2, 0)  # the tail "cc" is not a full block
    assert cache.admit("aaaabbbbcccc") == (3, 2)
    assert cache.admit("xxxxbbbbcccc") == (3, 0)  # same later blocks behind another first one: no hit
    assert (cache.queried, cache.hit) == (8, 2)


def test_least_recently_used_blocks_go_first() -> None:
    cache = PrefixCache(capacity=2, block_chars=2)
    cache.admit("aabb")
    cache.admit("cc")
    assert cache.admit("aabb") == (2, 0)  # "aa" was evicted by "cc", and "bb" chains on "aa"
    assert cache.admit("cc") == (1, 0)


def test_prompt_text_and_metrics() -> None:
    chat = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": None}]}
    assert prompt_text(chat) == "<system>s<user>"
    assert prompt_text({"prompt": "p"}) == "p"
    cache = PrefixCache(capacity=10, block_chars=1)
    cache.admit("ab")
    cache.admit("ab")
    text = cache.metrics("m")
    assert f'vllm:prefix_cache_queries_total{{model_name="m"}} {4 * BLOCK_TOKENS}' in text
    assert f'vllm:prefix_cache_hits_total{{model_name="m"}} {2 * BLOCK_TOKENS}' in text
