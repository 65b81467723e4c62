"""Step 3, resolve, on plain objects: a request offering tools to a model served without a tool-call
parser is a 400 naming the fleet-file field; models that serve tools, and servers run elsewhere, pass."""

from __future__ import annotations

import pytest

from gateway.errors import InvalidRequest
from gateway.pipeline.resolve import resolve, serves_tools
from gateway.values import RequestContext
from llmgw_contract.fleet import Model

PLAIN = Model.model_validate({"name": "plain", "source": {"path": "/m"}})
HERMES = Model.model_validate(
    {"name": "hermes", "source": {"path": "/m"}, "engine": {"tool_call_parser": "hermes"}}
)
EXTRA = Model.model_validate(
    {"name": "extra", "source": {"path": "/m"}, "engine": {"extra_args": ["--tool-call-parser", "hermes"]}}
)
ELSEWHERE = Model.model_validate(
    {"name": "elsewhere", "endpoints": [{"url": "http://127.0.0.1:9", "auth": "none"}]}
)
NAMES = {m.name: m for m in (PLAIN, HERMES, EXTRA, ELSEWHERE)}


def ctx(model: str, calls_tools: bool) -> RequestContext:
    c = RequestContext("rid", "chat/completions", b"", {}, 0.0, model_name=model)
    c.calls_tools = calls_tools
    return c


def test_serves_tools_from_the_parser_field_extra_args_or_an_outside_server() -> None:
    assert [serves_tools(m) for m in (PLAIN, HERMES, EXTRA, ELSEWHERE)] == [False, True, True, True]


def test_tools_to_a_model_without_parser_name_the_field() -> None:
    with pytest.raises(InvalidRequest, match=r"engine\.tool_call_parser for model 'plain'") as err:
        resolve(ctx("plain", True), NAMES)
    assert err.value.param == "tools" and err.value.status == 400


@pytest.mark.parametrize(("name", "calls_tools"), [("plain", False), ("hermes", True), ("elsewhere", True)])
def test_everything_else_resolves(name: str, calls_tools: bool) -> None:
    assert resolve(ctx(name, calls_tools), NAMES) is NAMES[name]
