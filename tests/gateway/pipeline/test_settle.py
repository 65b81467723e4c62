"""Step 7, finish: usage read from bodies and stream tails, metrics recorded, one log line per request."""

from __future__ import annotations

import logging

import pytest

from gateway.metrics import GatewayMetrics
from gateway.pipeline.settle import finish, stream_usage, usage_of
from gateway.values import Progress, RequestContext


def test_usage_of_a_body_and_of_one_without_usage() -> None:
    assert usage_of(b'{"id":"x","usage":{"prompt_tokens":11,"completion_tokens":4}}') == (11, 4)
    assert usage_of(b'{"id":"x"}') == (0, 0)
    assert usage_of(b'{"usage": broken') == (0, 0)


def test_stream_usage_reads_the_last_event_that_carries_it() -> None:
    tail = (
        b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}\n\n'
        b"data: [DONE]\n\n"
    )
    assert stream_usage(tail) == (5, 2)
    assert stream_usage(b"data: [DONE]\n\n") == (0, 0)


def test_finish_records_the_request_and_logs_one_line_with_its_id(caplog: pytest.LogCaptureFixture) -> None:
    metrics = GatewayMetrics()
    c = RequestContext("req-42", "chat/completions", b"", {}, started=0.0)
    c.progress = Progress(status=200, first_byte_at=0.01)
    with caplog.at_level(logging.INFO, logger="llmgw.access"):
        finish(c, metrics, prompt=9, completion=3)
    sample = metrics.registry.get_sample_value
    assert sample("llmgw_requests_total", {"model": "unknown", "status": "200"}) == 1
    assert sample("llmgw_prompt_tokens_total", {"model": "unknown"}) == 9
    assert sample("llmgw_completion_tokens_total", {"model": "unknown"}) == 3
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "request_id=req-42" in lines[0] and "status=200" in lines[0]
