"""The prefix chain: chunks hashed as a chain, so that a key names its whole prefix."""

from __future__ import annotations

from gateway.routing.prefix.chain import chain_keys, request_chain
from gateway.routing.prefix.prompt_text import chat_text, prompt_text


def msgs(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": r, "content": c} for r, c in pairs]


def test_key_i_depends_on_every_chunk_before_it() -> None:
    a = chain_keys(b"aaaabbbbcccc", 4, 10)
    b = chain_keys(b"xaaabbbbcccc", 4, 10)
    assert len(a) == 3 and all(len(k) == 16 for k in a)
    assert all(x != y for x, y in zip(a, b, strict=True))  # one byte in chunk 1 renames every key


def test_a_longer_prompt_extends_the_chain() -> None:
    short = chain_keys(b"aaaabbbbcc", 4, 10)
    long = chain_keys(b"aaaabbbbccccdd", 4, 10)
    assert long[:2] == short[:2]  # the full chunks are shared
    assert long[2] != short[2]  # a partial last chunk names a different prefix


def test_max_chunks_caps_the_chain() -> None:
    assert len(chain_keys(b"x" * 100, 4, 5)) == 5
    assert chain_keys(b"", 4, 5) == ()
    assert chain_keys(b"abc", 0, 5) == ()


def test_a_conversation_turn_matches_the_turn_before() -> None:
    system = "You are helpful. " * 40
    turn1 = msgs(("system", system), ("user", "first question"))
    turn2 = [*turn1, *msgs(("assistant", "an answer"), ("user", "second question"))]
    k1 = request_chain({"messages": turn1}, 64, 64)
    k2 = request_chain({"messages": turn2}, 64, 64)
    full = len(chat_text(turn1, 10**6)) // 64
    assert full >= 10 and k2[:full] == k1[:full] and k2 != k1


def test_roles_count() -> None:
    a = request_chain({"messages": msgs(("system", "x" * 100))}, 16, 64)
    b = request_chain({"messages": msgs(("user", "x" * 100))}, 16, 64)
    assert a[0] != b[0]


def test_shared_system_prompt_shares_the_first_keys() -> None:
    system = "Shared document. " * 30
    a = request_chain({"messages": msgs(("system", system), ("user", "q1"))}, 64, 64)
    b = request_chain({"messages": msgs(("system", system), ("user", "another"))}, 64, 64)
    assert a[:7] == b[:7] and a[-1] != b[-1]


def test_completion_prompts() -> None:
    assert request_chain({"prompt": "hello world"}, 4, 8) == chain_keys(b"hello world", 4, 8)
    assert request_chain({"prompt": ["hello world", "x"]}, 4, 8) == chain_keys(b"hello world", 4, 8)
    assert prompt_text([1, 22, 333], 100) == b"1,22,333,"
    assert request_chain({"prompt": [[1, 2, 3]]}, 4, 8) == chain_keys(b"1,2,3,", 4, 8)
    assert request_chain({"input": "embed me"}, 4, 8) == chain_keys(b"embed me", 4, 8)


def test_odd_input_gives_no_keys() -> None:
    for payload in ({}, {"messages": "x"}, {"prompt": 5}, {"prompt": [True]}, {"messages": [1, None]}):
        assert request_chain(payload, 16, 8) == ()
