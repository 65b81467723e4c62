"""The plan of a non-streamed request: one that may move is sent as a stream with usage and token ids
(the body rewritten), one that cannot move is sent untouched (run again whole if its replica fails)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.endpoints import ROUTES
from gateway.migration.whole import plan_whole
from gateway.pipeline.body import write_body
from gateway.values import MigrationPlan, RequestContext
from llmgw_contract.fleet import Model

MODEL = Model.model_validate({"name": "m", "source": {"path": "/m"}})
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
AS_STREAM = {"stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True}


def planned(c: RequestContext, model: Model) -> MigrationPlan | None:
    """The plan, and the body it sends (written by gateway/pipeline/body.py, as proxy.py does)."""
    plan = c.migration = plan_whole(c, model)
    write_body(c)
    return plan


def ctx(body: dict[str, Any] | bytes, path: str = "/v1/chat/completions") -> RequestContext:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    c = RequestContext("rid", path.removeprefix("/v1/"), raw, {}, 0.0, model_name="m")
    c.api = next(r for r in ROUTES if r.path == path)
    c.payload = orjson.loads(raw)
    return c


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_a_movable_request_is_sent_as_a_stream(path: str) -> None:
    body = CHAT if "chat" in path else {"model": "m", "prompt": "hi"}
    c = ctx(body, path)
    plan = planned(c, MODEL)
    assert plan is not None and plan.whole and not plan.reason and not plan.runs_again
    assert plan.usage and not plan.keep_ids and plan.chat == ("chat" in path)
    assert orjson.loads(c.body) == {**body, **AS_STREAM}
    assert c.body.startswith(b'{"stream":true,')  # put in front, the client's bytes kept


@pytest.mark.parametrize(
    "extra", [{"stream": False}, {"return_token_ids": True}, {"return_token_ids": False}, {"stream": None}]
)
def test_keys_the_client_set_are_overwritten(extra: dict[str, Any]) -> None:
    c = ctx({**CHAT, **extra})
    plan = planned(c, MODEL)
    assert plan is not None and orjson.loads(c.body) == {**CHAT, **AS_STREAM}
    assert plan.keep_ids == bool(extra.get("return_token_ids"))


def test_an_empty_object() -> None:
    c = ctx(b" { } ")
    assert planned(c, MODEL) is not None and orjson.loads(c.body) == AS_STREAM


@pytest.mark.parametrize(
    ("extra", "reason"),
    [({"n": 2}, "n > 1"), ({"logprobs": True}, "logprobs"), ({"stop": ["x"]}, "stop strings"),
     ({"stream_options": {"include_usage": True}}, "stream_options without stream")],
)  # fmt: skip
def test_what_cannot_move_is_sent_untouched(extra: dict[str, Any], reason: str) -> None:
    c = ctx({**CHAT, **extra})
    raw = c.body
    plan = planned(c, MODEL)
    assert plan is not None and plan.runs_again and plan.reason.startswith(reason)
    assert c.body is raw


def test_models_that_do_not_migrate_and_other_apis_have_no_plan() -> None:
    off = Model.model_validate({"name": "m", "source": {"path": "/m"}, "migration": False})
    c = ctx(CHAT)
    assert planned(c, off) is None and orjson.loads(c.body) == CHAT
    assert plan_whole(ctx({"model": "m", "input": "hi"}, "/v1/responses"), MODEL) is None
