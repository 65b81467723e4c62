"""The prefix key: system prompt(s) and first user turn of a chat; leading text of a completion prompt."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.routing.prefix.key import chat_prefix_key, prompt_prefix_key

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def test_chat_key_covers_system_and_first_user_turn() -> None:
    a = [SYSTEM, {"role": "user", "content": "Tell me about cats."}]
    b = [SYSTEM, {"role": "user", "content": "Tell me about dogs."}]
    key = chat_prefix_key(a, 1000)
    assert b"You are a helpful assistant." in key
    assert b"Tell me about cats." in key
    assert key != chat_prefix_key(b, 1000)  # not only the first message


def test_chat_key_stops_after_first_user_message() -> None:
    first = [SYSTEM, {"role": "user", "content": "Hi"}]
    later = [*first, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "More"}]
    assert chat_prefix_key(first, 1000) == chat_prefix_key(later, 1000)


def test_chat_key_takes_every_message_before_the_user() -> None:
    msgs = [SYSTEM, {"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Q"}]
    key = chat_prefix_key(msgs, 1000)
    assert b"helpful" in key
    assert b"Be brief." in key
    assert b"developer" in key


def test_chat_key_role_and_boundaries_count() -> None:
    as_system = [{"role": "system", "content": "X"}, {"role": "user", "content": "Y"}]
    as_user = [{"role": "user", "content": "X"}]
    joined = [{"role": "system", "content": "XY"}, {"role": "user", "content": ""}]
    keys = {chat_prefix_key(m, 100) for m in (as_system, as_user, joined)}
    assert len(keys) == 3


def test_chat_key_content_parts_take_text_only() -> None:
    parts = [
        SYSTEM,
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Describe "},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "text", "text": "this."},
            ],
        },
    ]
    plain = [SYSTEM, {"role": "user", "content": "Describe this."}]
    assert chat_prefix_key(parts, 1000) == chat_prefix_key(plain, 1000)
    assert b"base64" not in chat_prefix_key(parts, 1000)


def test_chat_key_truncates_to_max_chars() -> None:
    msgs = [{"role": "system", "content": "é" * 500}, {"role": "user", "content": "tail"}]
    key = chat_prefix_key(msgs, 64)
    assert len(key.decode("utf-8")) == 64
    assert chat_prefix_key(msgs, 64) == chat_prefix_key([msgs[0], {"role": "user", "content": "other"}], 64)


def test_chat_key_without_user_takes_all() -> None:
    msgs = [SYSTEM, {"role": "assistant", "content": "earlier"}]
    assert b"earlier" in chat_prefix_key(msgs, 1000)


def test_chat_key_odd_input_is_empty_or_skipped() -> None:
    assert chat_prefix_key(None, 100) == b""  # type: ignore[arg-type]
    assert chat_prefix_key("hello", 100) == b""  # type: ignore[arg-type]
    assert chat_prefix_key({"role": "user"}, 100) == b""  # type: ignore[arg-type]
    assert chat_prefix_key([], 100) == b""
    assert chat_prefix_key([SYSTEM], 0) == b""
    assert chat_prefix_key([SYSTEM], -5) == b""
    assert chat_prefix_key([SYSTEM], "10") == b""  # type: ignore[arg-type]
    odd = [1, None, "x", {"role": 5, "content": {"a": 1}}, {"role": "user", "content": None}]
    assert isinstance(chat_prefix_key(odd, 100), bytes)
    assert chat_prefix_key([{"role": "user", "content": "\ud800"}], 100)  # lone surrogate


def test_prompt_key_string_and_list_of_strings() -> None:
    assert prompt_prefix_key("Once upon a time", 4) == b"Once"
    assert prompt_prefix_key(["Once upon", "other"], 100) == b"Once upon"
    assert prompt_prefix_key("żółw", 2) == "żó".encode()


def test_prompt_key_token_ids() -> None:
    assert prompt_prefix_key([1, 2, 3], 100) == b"[1, 2, 3]"
    assert prompt_prefix_key([[1, 2, 3], [4]], 100) == b"[1, 2, 3]"
    assert prompt_prefix_key([7] * 10_000, 8) == b"[7, 7, 7"
    assert prompt_prefix_key([1, 2, 3], 100) != prompt_prefix_key([1, 2, 4], 100)


def test_prompt_key_odd_input_is_empty() -> None:
    odds: list[Any] = [None, 5, 1.5, {}, [], [None], [[]], [True, False], [1, "a"], [{"x": 1}], b"bytes"]
    for odd in odds:
        assert prompt_prefix_key(odd, 100) == b""
    assert prompt_prefix_key("abc", 0) == b""
    assert prompt_prefix_key("abc", None) == b""  # type: ignore[arg-type]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=25,
)
messages = st.lists(
    st.one_of(
        json_values,
        st.fixed_dictionaries(
            {"role": st.sampled_from(["system", "user", "assistant", "tool"]) | json_values},
            optional={"content": st.text(max_size=40) | json_values},
        ),
    ),
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(msgs=messages | json_values, max_chars=st.integers(-5, 200) | json_values)
def test_chat_key_never_raises(msgs: Any, max_chars: Any) -> None:
    key = chat_prefix_key(msgs, max_chars)
    assert isinstance(key, bytes)
    if isinstance(max_chars, int) and key:
        assert len(key.decode("utf-8", "surrogatepass")) <= max_chars


@settings(max_examples=150, deadline=None)
@given(prompt=json_values, max_chars=st.integers(-5, 200) | json_values)
def test_prompt_key_never_raises(prompt: Any, max_chars: Any) -> None:
    key = prompt_prefix_key(prompt, max_chars)
    assert isinstance(key, bytes)
    if isinstance(max_chars, int) and key:
        assert len(key.decode("utf-8", "surrogatepass")) <= max_chars
