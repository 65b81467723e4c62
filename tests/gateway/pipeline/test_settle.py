"""Step 7, finish: usage read from bodies and stream tails, metrics recorded, one log line per request."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import pytest
from prometheus_client import Counter

from gateway.metrics import GatewayMetrics
from gateway.pipeline.settle import finish, stream_usage, usage_of
from gateway.values import Caller, Progress, RequestContext


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


def counted(looked_up: list[tuple[str, ...]], labels: Callable[..., Counter], *names: str) -> Counter:
    looked_up.append(names)
    return labels(*names)


def test_a_tenants_series_are_looked_up_once_and_counted_on_every_request() -> None:
    """A keyed request's per-tenant series (``labels()`` takes a lock and builds a key each call): made
    on the tenant's first request for the model, reused after."""
    metrics = GatewayMetrics()
    c = RequestContext("req-1", "chat/completions", b"", {}, started=0.0)
    c.caller, c.progress = Caller("acme", "key-1"), Progress(status=200)
    finish(c, metrics, prompt=9, completion=0)
    looked_up: list[tuple[str, ...]] = []
    for counter in (metrics.tenant_requests, metrics.tenant_tokens):
        counter.labels = functools.partial(counted, looked_up, counter.labels)  # type: ignore[method-assign]
    finish(c, metrics, prompt=1, completion=3)
    sample = metrics.registry.get_sample_value
    tenant = {"tenant": "acme", "model": "unknown"}
    assert sample("llmgw_tenant_requests_total", {**tenant, "status": "200"}) == 2
    assert sample("llmgw_tenant_tokens_total", {**tenant, "kind": "prompt"}) == 10
    assert sample("llmgw_tenant_tokens_total", {**tenant, "kind": "completion"}) == 3
    assert looked_up == []
