"""The allow-list's matcher, the multipart form reader and the Anthropic error rendering, alone."""

from __future__ import annotations

import orjson
import pytest

from gateway.endpoints import match, match_scoped
from gateway.errors import (
    InvalidRequest,
    ModelNotFound,
    NoReadyReplica,
    Unauthorized,
    error_bytes,
    sse_error_event,
)
from gateway.pipeline.parse import boundary_of, form_fields


@pytest.mark.parametrize(
    ("method", "path", "found"),
    [
        ("POST", "/v1/chat/completions", ("/v1/chat/completions", "")),
        ("POST", "/tokenize", ("/tokenize", "")),
        ("GET", "/v1/responses/resp_abc-1", ("/v1/responses/{response_id}", "resp_abc-1")),
        ("POST", "/v1/responses/resp_abc/cancel", ("/v1/responses/{response_id}/cancel", "resp_abc")),
        ("POST", "/v1/responses/render", None),
        ("GET", "/v1/responses/resp_abc/cancel", None),
        ("DELETE", "/v1/responses/resp_abc", None),
        ("GET", "/v1/responses/", None),
        ("GET", "/v1/responses/a%2Fb", None),
        ("POST", "/sleep", None),
        ("POST", "/v1/load_lora_adapter", None),
        ("GET", "/v1/chat/completions", None),
    ],
)
def test_match(method: str, path: str, found: tuple[str, str] | None) -> None:
    got = match(method, path)
    assert (None if got is None else (got[0].path, got[1])) == found


@pytest.mark.parametrize(
    ("method", "path", "found"),
    [
        ("GET", "/models/smollm2/tokenizer_info", ("/tokenizer_info", "smollm2")),
        ("POST", "/models/org/model:v1/tokenize", ("/tokenize", "org/model:v1")),
        ("POST", "/models/m/v1/score", ("/v1/score", "m")),
        ("POST", "/models/m/v1/chat/completions", ("/v1/chat/completions", "m")),
        ("POST", "/models//tokenize", None),
        ("POST", "/models/m/sleep", None),
        ("GET", "/models/m/v1/responses/r1", None),
        ("POST", "/tokenize", None),
    ],
)
def test_match_scoped(method: str, path: str, found: tuple[str, str] | None) -> None:
    """Per-model base paths: the longest allow-listed path the request path ends with, for the model
    before it (names may hold ``/``)."""
    got = match_scoped(method, path)
    assert (None if got is None else (got[0].path, got[1])) == found


def test_form_fields_skip_files_and_read_text_fields() -> None:
    ctype = 'multipart/form-data; boundary="xyz"'
    body = (
        b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="model"\r\n\r\nname="model"\r\n'
        b'--xyz\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper\r\n'
        b'--xyz\r\nContent-Disposition: form-data; name="stream"\r\n\r\ntrue\r\n--xyz--\r\n'
    )
    assert form_fields(body, boundary_of(ctype), frozenset({"model", "stream"})) == {
        "model": "whisper",
        "stream": "true",
    }
    for bad in ("application/json", "multipart/form-data", "multipart/form-data; boundary="):
        with pytest.raises(InvalidRequest):
            boundary_of(bad)


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (InvalidRequest("x"), "invalid_request_error"),
        (Unauthorized("x"), "authentication_error"),
        (ModelNotFound("x"), "not_found_error"),
        (NoReadyReplica("x"), "overloaded_error"),
    ],
)
def test_anthropic_error_shape(err: InvalidRequest, kind: str) -> None:
    assert orjson.loads(error_bytes(err, "anthropic")) == {
        "type": "error",
        "error": {"type": kind, "message": "x"},
    }
    assert sse_error_event(err, "anthropic").startswith(b"event: error\ndata: {")
    assert set(orjson.loads(error_bytes(err))["error"]) == {"message", "type", "param", "code"}
