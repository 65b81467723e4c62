"""The body sent upstream, written in one place (gateway/pipeline/body.py): the keys the gateway sets
for its usage and for a stream that may move, in one write, the client's bytes kept where it can."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.endpoints import ROUTES
from gateway.migration.stream import plan_migration
from gateway.pipeline.body import write_body
from gateway.pipeline.usage import asks_usage
from gateway.values import RequestContext
from llmgw_contract.fleet import Model

MODEL = Model.model_validate({"name": "m", "source": {"path": "/m"}})
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
USAGE = {"stream_options": {"include_usage": True}}


def sent(payload: dict[str, Any], model: Model = MODEL) -> RequestContext:
    """A streamed chat as proxy.py has it after its plans: the body written."""
    raw = orjson.dumps(payload)
    c = RequestContext("rid", "chat/completions", raw, {}, 0.0, model_name="m", stream=True)
    c.api = next(r for r in ROUTES if r.path == "/v1/chat/completions")
    c.payload = payload
    c.strip_usage = asks_usage(payload)
    c.migration = plan_migration(c, model)
    write_body(c)
    return c


def test_a_stream_that_may_move_asks_usage_and_token_ids_in_front_of_the_clients_bytes() -> None:
    c = sent(CHAT)
    assert (
        c.body
        == b'{"return_token_ids":true,"stream_options":{"include_usage":true},' + orjson.dumps(CHAT)[1:]
    )
    assert c.strip_usage and c.migration is not None and not c.migration.keep_ids


@pytest.mark.parametrize(
    ("extra", "keep_ids"),
    [({"return_token_ids": False}, False), ({"stream_options": {"continuous_usage_stats": False}}, False),
     ({"return_token_ids": True, **USAGE}, True)],
)  # fmt: skip
def test_keys_the_client_set_are_encoded_again_with_the_gateways(
    extra: dict[str, Any], keep_ids: bool
) -> None:
    c = sent({**CHAT, **extra})
    body = orjson.loads(c.body)
    assert body["return_token_ids"] is True and body["stream_options"]["include_usage"] is True
    assert body["stream_options"] == {**extra.get("stream_options", {}), "include_usage": True}
    assert c.migration is not None and c.migration.keep_ids == keep_ids


def test_what_the_gateway_sets_nothing_on_is_sent_as_it_came() -> None:
    off = Model.model_validate({"name": "m", "source": {"path": "/m"}, "migration": False})
    own = {**CHAT, **USAGE}
    c = sent(own, off)
    assert c.migration is None and not c.strip_usage and c.body == orjson.dumps(own)
    c = sent({**CHAT, "n": 2}, off)  # no plan: only the usage asked
    assert orjson.loads(c.body) == {**CHAT, "n": 2, **USAGE}
