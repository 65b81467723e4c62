"""Step 2, parse, on plain bytes: the fields routing needs, and a clear 400 for each bad body."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import InvalidRequest
from gateway.pipeline.body import write_body
from gateway.pipeline.parse import parse
from gateway.values import RequestContext


def ctx(body: object, headers: dict[str, str] | None = None) -> RequestContext:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return RequestContext("rid", "chat/completions", raw, headers or {}, 0.0)


CHAT = {
    "model": "m",
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
}


def test_chat_body_gives_model_stream_and_a_prefix_key() -> None:
    c = ctx({**CHAT, "stream": True, "max_tokens": 7})
    size = len(c.body)
    parse(c, prefix_chars=1024)
    assert (c.model_name, c.stream) == ("m", True)
    assert c.route.prefix_key and c.route.session_key is None
    assert c.asked.max_tokens == 7 and c.cost.prompt == size // 4  # the client's body; the rest once resolved
    assert c.strip_usage  # exact usage asked for: in the body sent, written once after the plans
    write_body(c)
    assert b'"stream_options":{"include_usage":true}' in c.body


def test_same_conversation_prefix_gives_the_same_key_whatever_follows() -> None:
    a, b = ctx(CHAT), ctx({**CHAT, "temperature": 0.3})
    parse(a, 1024)
    parse(b, 1024)
    assert a.route.prefix_key == b.route.prefix_key


def test_session_comes_from_the_header_else_the_user_field() -> None:
    header, user = ctx(CHAT, {"x-session-id": "s1"}), ctx({**CHAT, "user": "u1"})
    parse(header, 1024)
    parse(user, 1024)
    assert (header.route.session_key, user.route.session_key) == ("s1", "u1")


def test_without_prompt_keys_no_prefix_key_or_chain_is_computed() -> None:
    """A model whose policy does not read the prompt (``Policy.reads_prompt``) pays for no prefix key and
    no prefix chain; the session key is still read (the session policy's)."""
    c = ctx({**CHAT, "user": "u1"})
    parse(c, 1024, prompt_keys=False)
    assert (c.route.prefix_key, c.route.chain, c.route.session_key) == (b"", (), "u1")
    parse(c, 1024)  # the default: both, as a policy that reads the prompt needs them
    assert c.route.prefix_key and c.route.chain


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        (b"{not json", None, "not valid JSON"),
        (b"[1, 2]", None, "must be a JSON object"),
        ({"messages": []}, "model", "model parameter"),
        ({"model": ""}, "model", "model parameter"),
        ({"model": "m", "stream": "yes"}, "stream", "stream must be a boolean"),
        ({"model": "m", "max_tokens": 0}, "max_tokens", "positive integer"),
        ({"model": "m", "max_tokens": True}, "max_tokens", "positive integer"),
    ],
)
def test_bad_bodies_are_a_400_naming_the_field(body: object, param: str | None, fragment: str) -> None:
    with pytest.raises(InvalidRequest, match=fragment) as err:
        parse(ctx(body), 1024)
    assert err.value.status == 400 and err.value.param == param


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize(
    ("extra", "offered"),
    [
        ({}, False),
        ({"tools": []}, False),
        ({"tools": TOOLS}, True),
        ({"tools": TOOLS, "tool_choice": "auto"}, True),
        ({"tools": TOOLS, "tool_choice": "required"}, True),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "f"}}}, True),
        ({"tools": TOOLS, "tool_choice": "none"}, False),
        ({"tools": TOOLS, "tool_choice": {"type": "none"}}, False),  # Anthropic's form
        ({"tools": TOOLS, "tool_choice": {"type": "any"}}, True),
    ],
)
def test_calls_tools_unless_none_is_chosen(extra: dict[str, object], offered: bool) -> None:
    c = ctx({**CHAT, **extra})
    parse(c, 1024)
    assert c.calls_tools is offered
