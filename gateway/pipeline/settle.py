"""Step 7, finish, and the one place a request's token cost is charged and refunded and its lease
released.

:func:`charge` reserves the request's cost (its prompt estimate plus the most it may generate,
gateway/pipeline/tokens.py) against its key's tokens per minute; :func:`holding` keeps an admitted
request's lease for as long as its answer runs and, on leaving (answered, failed or cut), releases it,
refunds what the usage did not use to the tenant's fair-share tag and the key (:func:`refund`, once) and,
once answered, records the request (:func:`finish`: metrics and one log line with the request id). A
request that fails before it is admitted is refunded by :func:`refund` alone."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import orjson

from gateway.admission.base import Lease
from gateway.metrics import GatewayMetrics
from gateway.pipeline.tokens import reserve, unused
from gateway.state import Gateway
from gateway.tracing import end_span
from gateway.values import RequestContext

log = logging.getLogger("llmgw.access")


@dataclass(slots=True)
class Usage:
    """What an admitted request used, filled in by its answer; ``answered``: a response was handed over
    (its end records the request), else the failure's answer records it."""

    prompt: int = 0
    completion: int = 0
    answered: bool = False


async def charge(gw: Gateway, ctx: RequestContext) -> None:
    """Reserve the resolved request's token cost and charge it to its key's tokens per minute."""
    assert ctx.model is not None
    ctx.cost = reserve(ctx.cost.prompt, ctx.asked, ctx.model.engine.max_model_len)
    ctx.charge = await gw.auth.charge(ctx.caller, ctx.model.name, ctx.cost)


async def refund(
    gw: Gateway, ctx: RequestContext, prompt: int, completion: int, lease: Lease | None = None
) -> None:
    """Refund what the request reserved but did not use, once, from its usage (zeros: nothing
    generated, e.g. a failure): to its key's tokens per minute and, through its ``lease``, to its
    tenant's fair-share tag; its prompt estimate stands in for a usage without prompt."""
    if lease is not None:
        await lease.refund(unused(ctx.cost.reserved, ctx.cost, prompt, completion))
    charged, ctx.charge = ctx.charge, None
    if charged is not None:
        await gw.auth.refund(ctx.caller, charged, unused(charged.tokens, ctx.cost, prompt, completion))


class holding:
    """The lease held for the body of the ``async with``; released, refunded and recorded on leaving.
    (A class, not a generator-based context manager: it is entered once per request.)"""

    __slots__ = ("ctx", "gw", "lease", "usage")

    def __init__(self, gw: Gateway, ctx: RequestContext, lease: Lease) -> None:
        self.gw, self.ctx, self.lease, self.usage = gw, ctx, lease, Usage()

    async def __aenter__(self) -> Usage:
        return self.usage

    async def __aexit__(self, *_: object) -> None:
        usage = self.usage
        await self.lease.release()
        await refund(self.gw, self.ctx, usage.prompt, usage.completion, self.lease)
        if usage.answered:
            finish(self.ctx, self.gw.metrics, usage.prompt, usage.completion)


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
    metrics.tenant_requests_of(tenant, model, ctx.progress.status).inc()
    series = metrics.tenant_series(tenant, model)
    series.prompt_tokens.inc(prompt)
    series.completion_tokens.inc(completion)


def finish(ctx: RequestContext, metrics: GatewayMetrics, prompt: int = 0, completion: int = 0) -> None:
    """The request's metrics and access line. Token counts come from the engine's usage as the answer
    reported it; a negative one (a malformed usage object) counts as 0 rather than failing the request."""
    now = time.perf_counter()
    prompt, completion = max(prompt, 0), max(completion, 0)
    end_span(ctx)
    model = ctx.model_label
    series = metrics.series(model)
    metrics.requests_of(model, ctx.progress.status).inc()
    series.latency.observe(now - ctx.started)
    if ctx.progress.first_byte_at is not None:
        series.ttft.observe(ctx.progress.first_byte_at - ctx.started)
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
        ctx.progress.status,
        ctx.progress.replica.id if ctx.progress.replica else "-",
        ctx.progress.attempts,
        ctx.stream,
        ctx.progress.wait_s * 1000,
        f"{(ctx.progress.first_byte_at - ctx.started) * 1000:.1f}" if ctx.progress.first_byte_at else "-",
        (now - ctx.started) * 1000,
        ctx.caller.tenant,
        ctx.progress.upstream_id or "-",
        f" error={ctx.progress.error!r}" if ctx.progress.error else "",
    )
