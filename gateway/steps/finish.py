"""Step 7, finish: record metrics and token usage, and log one line with the request id."""

from __future__ import annotations

import logging
import time

import orjson

from gateway.context import RequestContext
from gateway.metrics import GatewayMetrics
from gateway.tracing import end_span

log = logging.getLogger("llmgw.access")


def usage_of(body: bytes) -> tuple[int, int]:
    """(prompt, completion) tokens from a body's usage object: OpenAI's (prompt/completion_tokens), or the
    Responses and Messages APIs' (input/output_tokens, in a stream event's ``response`` for Responses);
    zeros when absent."""
    at = body.rfind(b'"usage"')
    if at < 0:
        return 0, 0
    try:
        payload = orjson.loads(body)
        usage = payload.get("usage") or (payload.get("response") or {}).get("usage") or {}
        prompt = usage.get("prompt_tokens") or usage.get("input_tokens") or 0
        return int(prompt), int(usage.get("completion_tokens") or usage.get("output_tokens") or 0)
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        return 0, 0


def stream_usage(tail: bytes) -> tuple[int, int]:
    """Usage from the last SSE event that carries one (sent when the client asked include_usage)."""
    at = tail.rfind(b'"usage":{')
    if at < 0:
        return 0, 0
    start = tail.rfind(b"data: ", 0, at)
    end = tail.find(b"\n", at)
    return usage_of(tail[start + 6 : end if end > 0 else None]) if start >= 0 else (0, 0)


def by_tenant(ctx: RequestContext, metrics: GatewayMetrics, prompt: int, completion: int) -> None:
    """Per-tenant counters, only when API keys are on (the anonymous tenant would repeat the totals)."""
    tenant, model = ctx.caller.tenant, ctx.model_label
    metrics.tenant_requests.labels(tenant, model, str(ctx.status)).inc()
    metrics.tenant_tokens.labels(tenant, model, "prompt").inc(prompt)
    metrics.tenant_tokens.labels(tenant, model, "completion").inc(completion)


def finish(ctx: RequestContext, metrics: GatewayMetrics, prompt: int = 0, completion: int = 0) -> None:
    now = time.perf_counter()
    end_span(ctx)
    model = ctx.model_label
    series = metrics.series(model)
    metrics.requests_of(model, ctx.status).inc()
    series.latency.observe(now - ctx.started)
    if ctx.first_byte_at is not None:
        series.ttft.observe(ctx.first_byte_at - ctx.started)
    if prompt:
        series.prompt_tokens.inc(prompt)
    if completion:
        series.completion_tokens.inc(completion)
    if ctx.caller.key_id:
        by_tenant(ctx, metrics, prompt, completion)
    if ctx.headers.get("x-stainless-retry-count", "0") != "0":
        metrics.client_retries.labels(model).inc()
    if not log.isEnabledFor(logging.INFO):  # the line's fields are not even formatted
        return
    log.info(
        "request_id=%s model=%s endpoint=%s status=%d replica=%s attempts=%d stream=%s wait_ms=%.1f"
        " ttft_ms=%s duration_ms=%.1f tenant=%s upstream_id=%s%s",
        ctx.request_id,
        model,
        ctx.endpoint,
        ctx.status,
        ctx.replica.id if ctx.replica else "-",
        ctx.attempts,
        ctx.stream,
        ctx.wait_s * 1000,
        f"{(ctx.first_byte_at - ctx.started) * 1000:.1f}" if ctx.first_byte_at else "-",
        (now - ctx.started) * 1000,
        ctx.caller.tenant,
        ctx.upstream_id or "-",
        f" error={ctx.error!r}" if ctx.error else "",
    )
