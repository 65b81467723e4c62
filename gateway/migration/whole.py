"""The plan of a non-streamed generation of a model that migrates.

One that may move (the same rules as a stream: :func:`~gateway.migration.plan.why_not`) is sent to the
replica as a stream asking for token ids and usage (``stream``, ``stream_options.include_usage``,
``return_token_ids``): read through :class:`~gateway.migration.stream.MigratingStream`, it continues
token-exact on another replica when its replica fails, and the client gets one whole answer
(gateway/migration/assemble.py). One that cannot move is forwarded as the client wrote it and, when its
replica fails before answering, runs again whole on another (gateway/pipeline/migrate.py).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.migration.plan import MOVABLE_PATHS, why_not
from gateway.values import MigrationPlan, RequestContext
from llmgw_contract.fleet import Model

AS_STREAM = b'{"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true,'
SET_HERE = ("stream", "stream_options", "return_token_ids")


def plan_whole(ctx: RequestContext, model: Model) -> MigrationPlan | None:
    """None when the model does not migrate or the API cannot move; else a ``whole`` plan: movable
    (``reason`` empty, ``ctx.body`` rewritten as a stream) or not (``reason`` says why; body untouched)."""
    if not model.migrates or ctx.api.name not in MOVABLE_PATHS:
        return None
    payload = ctx.payload if ctx.payload is not None else orjson.loads(ctx.body)
    adapter = ctx.model_name not in (model.name, *model.aliases)
    reason = why_not(payload, ctx.api.name, adapter) or _stream_options(payload)
    plan = MigrationPlan(payload, reason, ctx.api.name == "chat/completions", whole=True)
    plan.attempts = model.migration_attempts
    if reason:
        return plan
    plan.usage, plan.keep_ids = True, bool(payload.get("return_token_ids"))
    ctx.body = as_stream(payload, ctx.body)
    return plan


def as_stream(payload: dict[str, Any], body: bytes) -> bytes:
    """The body asking for a stream with usage and token ids: three keys put in front when the client
    set none of them (no re-encoding), else the payload encoded again."""
    if any(k in payload for k in SET_HERE):
        options = {"include_usage": True}
        return orjson.dumps({**payload, "stream": True, "stream_options": options, "return_token_ids": True})
    rest = body.lstrip()[1:]
    return AS_STREAM + rest if rest.lstrip()[:1] != b"}" else AS_STREAM[:-1] + b"}"


def _stream_options(payload: dict[str, Any]) -> str:
    """vLLM refuses ``stream_options`` without ``stream``: such a request is forwarded for its answer."""
    return "stream_options without stream" if payload.get("stream_options") else ""
