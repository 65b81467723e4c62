"""Step 2, parse: size cap, JSON (or a multipart form), and only the fields routing needs (the body passes
on untouched)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs

import orjson

from gateway.errors import InvalidRequest
from gateway.pipeline.media import may_hold_media, media_urls
from gateway.pipeline.tokens import asked, prompt_estimate
from gateway.pipeline.usage import USAGE_OPTION_APIS, asks_usage
from gateway.routing.prefix.chain import request_chain
from gateway.routing.prefix.key import chat_prefix_key, prompt_prefix_key
from gateway.values import Asked, RequestContext, RouteRequest, TokenCost


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
    prompt_keys: bool = True,
) -> RouteRequest:
    """What a policy may know of the request; ``prompt_keys`` false: no prefix key and no chain (the
    model's policy reads neither: ``Policy.reads_prompt``), which cost most on a long prompt."""
    user = payload.get("user")
    session = ctx.headers.get("x-session-id") or (user if isinstance(user, str) and user else None)
    if not prompt_keys:
        return RouteRequest(session_key=session)
    messages = payload.get("messages")
    if isinstance(messages, list):
        key = chat_prefix_key(messages, prefix_chars)
    else:
        key = prompt_prefix_key(payload.get("prompt", payload.get("input")), prefix_chars)
    chain = request_chain(payload, chunk_bytes, max_chunks)
    return RouteRequest(prefix_key=key, session_key=session, chain=chain)


def calls_tools(payload: dict[str, Any]) -> bool:
    """True when the request offers tools the model may call: ``tools`` given and ``tool_choice`` not
    none (OpenAI's ``"none"``, Anthropic's ``{"type": "none"}``). vLLM needs a tool-call parser for
    every other choice (auto, required, a named function)."""
    if not payload.get("tools"):
        return False
    choice = payload.get("tool_choice")
    return choice != "none" and not (isinstance(choice, dict) and choice.get("type") == "none")


def previous_response_field(payload: dict[str, Any]) -> str:
    previous = payload.get("previous_response_id")
    if previous is None:
        return ""
    if not isinstance(previous, str) or not previous:
        raise InvalidRequest("previous_response_id must be a non-empty string", param="previous_response_id")
    return previous


def boundary_of(content_type: str) -> bytes:
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        raise InvalidRequest("this endpoint takes a multipart/form-data body")
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.lower() == "boundary" and value.strip('"'):
            return value.strip('"').encode("latin-1")
    raise InvalidRequest("the multipart/form-data content type has no boundary")


def form_fields(body: bytes, boundary: bytes, wanted: frozenset[str]) -> dict[str, str]:
    """The small text fields named ``wanted`` of a multipart form (files are skipped, never copied)."""
    fields: dict[str, str] = {}
    for part in body.split(b"--" + boundary)[1:]:
        head, sep, value = part.partition(b"\r\n\r\n")
        if not sep:
            continue
        params = disposition_params(head)
        name = params.get("name")
        if name in wanted and "filename" not in params:
            fields[name] = value.removesuffix(b"\r\n").decode("utf-8", "replace")
    return fields


DISPOSITION_PARAM = re.compile(r';[ \t]*([^=;]+?)[ \t]*=[ \t]*("(?:[^"\\]|\\.)*"|[^;]*)')


def disposition_params(head: bytes) -> dict[str, str]:
    """The Content-Disposition parameters of a form part's headers, read as vLLM's form parser
    (python-multipart, through Starlette) reads them: the header's name in any case, parameter names
    lower-cased, values quoted (``name="model"``, escapes undone) or not (``name=model``), a ``;`` inside
    quotes kept, extended ``name*=`` parameters ignored (RFC 7578 forbids them)."""
    for line in head.split(b"\r\n"):
        header, sep, value = line.partition(b":")
        if sep and header.strip().lower() == b"content-disposition":
            params: dict[str, str] = {}
            for match in DISPOSITION_PARAM.finditer(value.decode("latin-1")):
                key, raw = match.group(1).lower(), match.group(2).strip(" \t")
                if "*" in key:
                    continue
                if len(raw) >= 2 and raw[0] == raw[-1] == '"':
                    raw = raw[1:-1].replace("\\\\", "\\").replace('\\"', '"')
                params[key] = raw
            return params
    return {}


def parse_form(ctx: RequestContext) -> None:
    """Audio endpoints: the model (and stream) are form fields next to the file."""
    ctx.content_type = ctx.headers.get("content-type", "")
    fields = form_fields(ctx.body, boundary_of(ctx.content_type), frozenset({"model", "stream"}))
    ctx.model_name = scoped_model(fields, ctx.path_model)
    ctx.stream = fields.get("stream", "false").strip().lower() == "true"
    ctx.asked = Asked(max_tokens=0)
    ctx.cost = TokenCost(prompt_estimate(ctx.body))


def query_model(query: bytes, path_model: str = "") -> str:
    """The ``model`` of a query string (``GET /tokenizer_info?model=smollm2``), else the path's."""
    values = parse_qs(query.decode("latin-1")).get("model", [])
    return scoped_model({"model": values[0] if values else None}, path_model)


def scoped_model(fields: dict[str, Any], path_model: str) -> str:
    """The request's model: the body's (or query's) ``model``; under a per-model base path
    (``/models/{model}/...``) the path's, which a ``model`` field given too must match."""
    if not path_model:
        return model_field(fields)
    given = fields.get("model")
    if given is not None and given != path_model:
        raise InvalidRequest(
            f"the request names the model {given!r} but its path /models/{path_model}/ names "
            f"'{path_model}': leave model out or give the same one",
            param="model",
        )
    return path_model


def parse(
    ctx: RequestContext,
    prefix_chars: int,
    chunk_bytes: int = 512,
    max_chunks: int = 64,
    prompt_keys: bool = True,
) -> None:
    """The body's size was capped as it was read (intake.read_body). A path without a body has nothing
    to parse: a stored response's GET or cancel gets its model from the response's record, any other
    (``GET /tokenizer_info``) from the query's ``model``; under a per-model base path
    (``/models/{model}/...``) the model is the path's. ``prompt_keys`` false: the route has no prefix
    key and no chain (:func:`route_request`; the request path adds them once the model's policy is known
    to read them)."""
    if ctx.api.body == "none":
        if not ctx.api.stored:
            ctx.model_name = query_model(ctx.query, ctx.path_model)
        return
    if ctx.api.body == "multipart":
        parse_form(ctx)
        return
    payload = ctx.payload = load_json(ctx.body)
    ctx.model_name = scoped_model(payload, ctx.path_model)
    ctx.stream = stream_field(payload)
    ctx.route = route_request(ctx, payload, prefix_chars, chunk_bytes, max_chunks, prompt_keys)
    ctx.asked = asked(payload, ctx.endpoint)
    ctx.calls_tools = calls_tools(payload)
    ctx.cost = TokenCost(prompt_estimate(ctx.body))  # what it may generate is added once resolved
    if may_hold_media(ctx.body):  # then the parsed payload, whole, as the replica will read it
        ctx.media = media_urls(payload)
    if ctx.stream and ctx.endpoint in USAGE_OPTION_APIS:
        ctx.strip_usage = asks_usage(payload)  # (asked in the body sent: gateway/pipeline/body.py)
    if ctx.api.stored:
        ctx.response_id = previous_response_field(payload)
