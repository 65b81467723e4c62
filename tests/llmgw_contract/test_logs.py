"""``LLMGW_LOG_FORMAT=json`` (issue 45): one JSON object per line, with the request id and trace id of
the lines that carry them as fields; text stays the default; another value is refused."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from gateway.tracing import TRACE_ID, TraceIdFilter
from llmgw_contract.logs import configure_logging, log_format


@pytest.fixture
def root_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_the_request_and_trace_ids(
    root_restored: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMGW_LOG_FORMAT", "json")
    out = io.StringIO()
    configure_logging(logging.INFO, stream=out)
    for handler in logging.getLogger().handlers:
        handler.addFilter(TraceIdFilter())  # as llmgw-gateway does
    log = logging.getLogger("llmgw.test")
    token = TRACE_ID.set("4bf92f3577b34da6a3ce929d0e0e4736")
    try:
        log.warning('request_id=%s model=%s upstream "refused"', "req-1", "m")
    finally:
        TRACE_ID.reset(token)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("no request here")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["request_id"] == "req-1" and first["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert (first["level"], first["logger"]) == ("WARNING", "llmgw.test")
    assert first["message"].endswith('model=m upstream "refused"') and first["time"].endswith("+00:00")
    assert "request_id" not in second and "RuntimeError: boom" in second["exception"]


def test_text_is_the_default(root_restored: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMGW_LOG_FORMAT", raising=False)
    out = io.StringIO()
    configure_logging(logging.INFO, stream=out)
    logging.getLogger("llmgw.test").info("request_id=r hello")
    assert out.getvalue().rstrip().endswith("INFO llmgw.test request_id=r hello")


def test_another_format_is_refused() -> None:
    assert log_format("JSON") == "json" and log_format("") == "text"
    with pytest.raises(ValueError, match="text or json"):
        log_format("xml")
