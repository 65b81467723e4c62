"""The one place the body sent upstream is written: :func:`write_body`, once per request, after its
plans (proxy.py), so that the client's body is copied at most once whatever the gateway adds to it.

What the gateway sets, and why: ``stream_options.include_usage`` on a stream that did not ask it (its
exact usage for the token limits: usage.py, parse.py's ``strip_usage``); ``return_token_ids`` on a
stream that may move (gateway/migration/stream.py); ``stream``, ``stream_options.include_usage`` and
``return_token_ids`` on a non-streamed generation that may move, read as a stream
(gateway/migration/whole.py). A continuation is a body of its own (gateway/migration/plan.py
``continuation``), sent to its replica beside this one (forward.py ``attempt_on``).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.values import RequestContext


def as_stream() -> dict[str, Any]:
    """What a non-streamed generation that may move is sent with (in this order, in front of its keys)."""
    return {"stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True}


def write_body(ctx: RequestContext) -> None:
    """``ctx.body`` with the keys the gateway sets (:func:`gateway_keys`); untouched when none."""
    payload = ctx.payload
    if payload is None:  # (a form, or a path without a body: sent as it came)
        return
    keys = gateway_keys(ctx, payload)
    if keys:
        ctx.body = with_keys(payload, ctx.body, keys)


def gateway_keys(ctx: RequestContext, payload: dict[str, Any]) -> dict[str, Any]:
    """The keys the gateway sets on the request's body, with their values (none: sent as it came)."""
    plan = ctx.migration
    if plan is not None and plan.whole:
        return as_stream() if not plan.reason else {}
    keys: dict[str, Any] = {}
    if plan is not None and not plan.reason and not plan.keep_ids:
        keys["return_token_ids"] = True
    if ctx.strip_usage:  # the client's own stream options kept, usage added
        keys["stream_options"] = {**(payload.get("stream_options") or {}), "include_usage": True}
    return keys


def with_keys(payload: dict[str, Any], body: bytes, keys: dict[str, Any]) -> bytes:
    """``body`` (the JSON of ``payload``) with ``keys`` set: put in front of the client's own keys when
    the client set none of them (its bytes kept, no re-encoding), else ``payload`` with them, encoded
    again."""
    if not keys.keys().isdisjoint(payload):
        return orjson.dumps({**payload, **keys})
    at = body.find(b"{") + 1
    rest = body[at:]
    head = orjson.dumps(keys)[1:-1]
    return body[:at] + head + (b"," + rest if rest.lstrip()[:1] != b"}" else rest)
