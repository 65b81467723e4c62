"""Request-body schemas for the OpenAPI document (the handlers themselves parse only what routing needs)."""

from __future__ import annotations

from typing import Any

from gateway.endpoints import Route

_MESSAGE = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"type": "string", "enum": ["system", "user", "assistant", "tool", "developer"]},
        "content": {"type": "string"},
    },
}
_COMMON = {
    "model": {"type": "string"},
    "stream": {"type": "boolean"},
    "max_tokens": {"type": "integer", "minimum": 1},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "user": {"type": "string"},
}
SCHEMAS: dict[str, dict[str, Any]] = {
    "chat/completions": {
        "type": "object",
        "required": ["model", "messages"],
        "properties": {**_COMMON, "messages": {"type": "array", "items": _MESSAGE, "minItems": 1}},
    },
    "completions": {
        "type": "object",
        "required": ["model", "prompt"],
        "properties": {**_COMMON, "prompt": {"type": "string"}},
    },
    "embeddings": {
        "type": "object",
        "required": ["model", "input"],
        "properties": {"model": {"type": "string"}, "input": {"type": "string"}},
    },
    "responses": {
        "type": "object",
        "required": ["model", "input"],
        "properties": {
            **_COMMON,
            "input": {"type": "string"},
            "previous_response_id": {"type": "string"},
            "store": {"type": "boolean"},
        },
    },
    "messages": {
        "type": "object",
        "required": ["model", "messages", "max_tokens"],
        "properties": {**_COMMON, "messages": {"type": "array", "items": _MESSAGE, "minItems": 1}},
    },
    "messages/count_tokens": {
        "type": "object",
        "required": ["model", "messages"],
        "properties": {"model": {"type": "string"}, "messages": {"type": "array", "items": _MESSAGE}},
    },
    "tokenize": {
        "type": "object",
        "required": ["model"],
        "properties": {
            "model": {"type": "string"},
            "prompt": {"type": "string"},
            "messages": {"type": "array"},
        },
    },
    "detokenize": {
        "type": "object",
        "required": ["model", "tokens"],
        "properties": {
            "model": {"type": "string"},
            "tokens": {"type": "array", "items": {"type": "integer"}},
        },
    },
}
_PAIRS = {
    "type": "object",
    "required": ["model"],
    "properties": {
        "model": {"type": "string"},
        "query": {"type": "string"},
        "documents": {"type": "array", "items": {"type": "string"}},
        "text_1": {"type": "string"},
        "text_2": {"type": "string"},
    },
}
_POOLING = {
    "type": "object",
    "required": ["model", "input"],
    "properties": {"model": {"type": "string"}, "input": {"type": "string"}},
}
_AUDIO = {
    "type": "object",
    "required": ["model", "file"],
    "properties": {"model": {"type": "string"}, "file": {"type": "string", "format": "binary"}},
}
_RESPONSE_ID = {"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}


def schema_of(api: Route) -> dict[str, Any]:
    if api.name in SCHEMAS:
        return SCHEMAS[api.name]
    return _PAIRS if "rerank" in api.name or "score" in api.name else _POOLING


def request_body(api: Route) -> dict[str, Any]:
    """The OpenAPI fragment of one proxied route: its body's schema, or its path parameter."""
    if api.body == "none":
        return {"parameters": [_RESPONSE_ID]}
    if api.body == "multipart":
        return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": _AUDIO}}}}
    schema = schema_of(api)
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
