"""Multipart form parts are named as vLLM reads them (issue 45): vLLM's form parser (python-multipart
through Starlette) accepts ``form-data;name=model`` (no quotes, no space), any case of the header and
parameter names, and a ``;`` inside a quoted name; the gateway must find the same ``model`` and
``stream`` fields, or it refuses a request vLLM would serve."""

from __future__ import annotations

import pytest

from gateway.pipeline.parse import boundary_of, disposition_params, form_fields

DISPOSITIONS = [
    'form-data; name="model"',
    "form-data;name=model",
    "form-data; name=model",
    "form-data; NAME = model ",
    'form-data; name="mo;del"',
    'form-data; name="a\\"b"',
    'form-data; filename="x.wav"; name=file',
    "form-data; name=file; filename=x.wav",
    "form-data; name*=utf-8''model; name=model",
    "form-data",
]


@pytest.mark.parametrize("disposition", DISPOSITIONS)
def test_parameters_match_vllms_form_parser(disposition: str) -> None:
    multipart = pytest.importorskip("python_multipart.multipart")
    _, theirs = multipart.parse_options_header(disposition)
    expected = {k.decode("latin-1"): v.decode("latin-1") for k, v in theirs.items()}
    head = b"\r\nContent-Disposition: " + disposition.encode("latin-1")
    assert disposition_params(head) == expected


def test_unquoted_and_lower_case_names_are_read() -> None:
    body = (
        b"--xyz\r\ncontent-disposition: form-data;name=file;filename=a.wav\r\n\r\nRIFF....\r\n"
        b"--xyz\r\nContent-Disposition: form-data;name=model\r\n\r\nwhisper\r\n"
        b"--xyz\r\nCONTENT-DISPOSITION: form-data; Name=stream\r\n\r\ntrue\r\n--xyz--\r\n"
    )
    fields = form_fields(
        body, boundary_of("multipart/form-data; boundary=xyz"), frozenset({"model", "stream"})
    )
    assert fields == {"model": "whisper", "stream": "true"}
