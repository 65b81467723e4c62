"""Request-body schemas for the OpenAPI document (the handlers themselves parse only what routing needs)."""

from __future__ import annotations

from typing import Any

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
}


def request_body(endpoint: str) -> dict[str, Any]:
    schema = SCHEMAS[endpoint]
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
