"""Step 2, parse: size cap, JSON, and only the fields routing needs (the body passes on untouched)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context import RequestContext
from gateway.errors import InvalidRequest
from gateway.prefix_chain import request_chain
from gateway.prefix_key import chat_prefix_key, prompt_prefix_key
from gateway.routing.base import RouteRequest
from gateway.steps.tokens import TokenCost, asked, prompt_estimate


def load_json(body: bytes) -> dict[str, Any]:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise InvalidRequest("request body must be a JSON object")
    return payload


def model_field(payload: dict[str, Any]) -> str:
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("you must provide a model parameter (a non-empty string)", param="model")
    return model


def stream_field(payload: dict[str, Any]) -> bool:
    stream = payload.get("stream", False)
    if stream is None:
        return False
    if not isinstance(stream, bool):
        raise InvalidRequest("stream must be a boolean", param="stream")
    return stream


def route_request(
    ctx: RequestContext,
    payload: dict[str, Any],
    prefix_chars: int,
    chunk_bytes: int = 512,
    max_chunks: int = 64,
) -> RouteRequest:
    messages = payload.get("messages")
    if isinstance(messages, list):
        key = chat_prefix_key(messages, prefix_chars)
    else:
        key = prompt_prefix_key(payload.get("prompt", payload.get("input")), prefix_chars)
    user = payload.get("user")
    session = ctx.headers.get("x-session-id") or (user if isinstance(user, str) and user else None)
    chain = request_chain(payload, chunk_bytes, max_chunks)
    return RouteRequest(prefix_key=key, session_key=session, chain=chain)


def parse(ctx: RequestContext, prefix_chars: int, chunk_bytes: int = 512, max_chunks: int = 64) -> None:
    """The body's size was capped as it was read (see proxy.read_body)."""
    payload = load_json(ctx.body)
    ctx.model_name = model_field(payload)
    ctx.stream = stream_field(payload)
    ctx.route = route_request(ctx, payload, prefix_chars, chunk_bytes, max_chunks)
    ctx.asked = asked(payload, ctx.endpoint)
    ctx.cost = TokenCost(prompt_estimate(ctx.body))  # what it may generate is added once resolved
