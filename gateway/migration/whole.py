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


def plan_whole(ctx: RequestContext, model: Model) -> MigrationPlan | None:
    """None when the model does not migrate or the API cannot move; else a ``whole`` plan: movable
    (``reason`` empty: sent as a stream, written in the body by gateway/pipeline/body.py) or not
    (``reason`` says why; the body untouched)."""
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
    return plan


def _stream_options(payload: dict[str, Any]) -> str:
    """vLLM refuses ``stream_options`` without ``stream``: such a request is forwarded for its answer."""
    return "stream_options without stream" if payload.get("stream_options") else ""
