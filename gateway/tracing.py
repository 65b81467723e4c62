"""Trace context, end to end (W3C Trace Context).

A client's valid ``traceparent`` (with its ``tracestate``) goes to the replica unchanged, so vLLM's own
spans (``--otlp-traces-endpoint``) join the client's trace. With tracing off (the default) that is all:
a request without one (or with an invalid one) gets none, nothing is made or allocated for it, and no
OpenTelemetry code runs. With ``LLMGW_TRACING=true`` a request without one starts a new sampled trace
(the gateway's root span's), which the replica gets; and the gateway
emits its own spans over OTLP/gRPC to ``LLMGW_OTLP_TRACES_ENDPOINT`` (the standard ``OTEL_*`` variables
win where set: :func:`otel_tracer`; ``OTEL_SDK_DISABLED=true`` keeps them off): one per request
(``llmgw.request``) with a child for authenticate, queue_wait, wake, pick, and forward (``retry`` for each
attempt after the first); the replica's traceparent then names the forward span as its parent.

Each log line written while a request is served carries its trace id beside its request id
(:class:`TraceIdFilter`, on the gateway's log handler; the id is the request task's context variable).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from llmgw_contract.extras import require_extra

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

    from gateway.values import RequestContext

TRACEPARENT = re.compile(r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
NO_SPAN: AbstractContextManager[None] = nullcontext()
# The trace id of the request the current task serves, for its log lines (a context variable: each
# request task has its own value; nothing is shared between requests).
TRACE_ID: ContextVar[str] = ContextVar("llmgw_trace_id", default="")


def valid_traceparent(given: str) -> bool:
    """A W3C traceparent of version 00's length and shape (not the all-zero ids, not version ff)."""
    return len(given) == 55 and TRACEPARENT.fullmatch(given) is not None


def traceparent_of(given: str) -> str:
    """The client's traceparent when it is valid, else a new sampled one."""
    if valid_traceparent(given):
        return given
    raw = os.urandom(24).hex()
    return f"00-{raw[:32]}-{raw[32:]}-01"


def trace_id(traceparent: str) -> str:
    return traceparent[3:35]


class TraceIdFilter(logging.Filter):
    """Writes ``trace_id=...`` right after the ``request_id=...`` of a line logged while a request is
    served (or at the line's end when it names no request id)."""

    def filter(self, record: logging.LogRecord) -> bool:
        tid = TRACE_ID.get()
        if not tid:
            return True
        msg = record.getMessage()
        at = msg.find("request_id=")
        if at < 0:
            msg = f"{msg} trace_id={tid}"
        else:
            end = msg.find(" ", at)
            end = len(msg) if end < 0 else end
            msg = f"{msg[:end]} trace_id={tid}{msg[end:]}"
        record.msg, record.args = msg, ()
        return True


OTEL_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def otel_disabled() -> bool:
    """``OTEL_SDK_DISABLED=true``: the operator turned OpenTelemetry off."""
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def otel_tracer(endpoint: str, service_instance: str) -> tuple[TracerProvider, Tracer]:
    """An SDK tracer provider that batches spans to an OTLP/gRPC endpoint (imported only when on).

    The standard ``OTEL_*`` variables win over the gateway's own values, which are defaults only: the
    endpoint (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_EXPORTER_OTLP_ENDPOINT``, with their
    ``..._INSECURE``, ``..._HEADERS``, ``..._CERTIFICATE``) and the resource (``OTEL_SERVICE_NAME``,
    ``OTEL_RESOURCE_ATTRIBUTES``); the sampler (``OTEL_TRACES_SAMPLER``) and the batching (``OTEL_BSP_*``)
    are the SDK's, read from the environment as it does."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    ours = {"service.name": "llmgw-gateway", "service.instance.id": service_instance}
    from_env = OTELResourceDetector().detect().attributes
    resource = Resource.create({k: v for k, v in ours.items() if k not in from_env})
    provider = TracerProvider(resource=resource)
    if any(os.environ.get(name) for name in OTEL_ENDPOINTS):
        exporter = OTLPSpanExporter()  # endpoint, TLS and headers from the OTEL_* variables
    else:
        exporter = OTLPSpanExporter(endpoint=endpoint, insecure=not endpoint.startswith("https://"))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider, provider.get_tracer("llmgw.gateway")


class Tracing:
    """The gateway's spans: none at all when off (every call returns at once). On, it needs the ``tracing``
    extra: without it the constructor raises :class:`llmgw_contract.extras.MissingExtra` (at app creation)."""

    def __init__(self, enabled: bool, endpoint: str, service_instance: str) -> None:
        self._provider: TracerProvider | None = None
        self._tracer: Tracer | None = None
        if enabled and not otel_disabled():
            require_extra("tracing", "LLMGW_TRACING=true")  # MissingExtra: llmgw-gateway exits naming it
            self._provider, self._tracer = otel_tracer(endpoint, service_instance)

    @property
    def on(self) -> bool:
        return self._tracer is not None

    def begin(self, ctx: RequestContext, given: str, state: str) -> None:
        """The request's trace: the client's ``given`` traceparent (and ``state``) when valid. Tracing
        off, a request without one keeps none (nothing made: the path every request of the default
        takes allocates nothing here). On: the request's root span, a child of the client's, or a root
        of its own whose new trace the replica gets."""
        if given and valid_traceparent(given):
            ctx.traceparent, ctx.tracestate = given, state
        elif self._tracer is None:
            return
        else:
            ctx.traceparent = traceparent_of("")
        if self._tracer is not None:
            self._root(self._tracer, ctx, ctx.traceparent == given)
        TRACE_ID.set(trace_id(ctx.traceparent))

    @staticmethod
    def _root(tracer: Tracer, ctx: RequestContext, given: bool) -> None:
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier = {"traceparent": ctx.traceparent, "tracestate": ctx.tracestate}
        parent = TraceContextTextMapPropagator().extract(carrier) if given else None
        attributes = {"llmgw.request_id": ctx.request_id, "llmgw.endpoint": ctx.endpoint}
        ctx.span = span = tracer.start_span("llmgw.request", parent, SpanKind.SERVER, attributes)
        if not given:
            own = span.get_span_context()
            ctx.traceparent = f"00-{own.trace_id:032x}-{own.span_id:016x}-01"

    def span(self, ctx: RequestContext, name: str) -> AbstractContextManager[Span | None]:
        """A child span of the request's for one step; a shared no-op when tracing is off."""
        if ctx.span is None or self._tracer is None:
            return NO_SPAN
        return self._child(self._tracer, ctx.span, name, {})

    def attempt_span(self, ctx: RequestContext, replica: str) -> AbstractContextManager[Span | None]:
        """The span of the request's current attempt at ``replica``: ``forward``, ``retry`` after the first,
        with the replica and attempt as attributes (built only when traced); the shared no-op when off."""
        if ctx.span is None or self._tracer is None:
            return NO_SPAN
        name = "retry" if ctx.progress.attempts > 1 else "forward"
        attributes = {"llmgw.replica": replica, "llmgw.attempt": ctx.progress.attempts}
        return self._child(self._tracer, ctx.span, name, attributes)

    @staticmethod
    @contextmanager
    def _child(tracer: Tracer, root: Span, name: str, attributes: dict[str, Any]) -> Iterator[Span]:
        from opentelemetry.trace import set_span_in_context

        with tracer.start_as_current_span(name, set_span_in_context(root), attributes=attributes) as span:
            yield span

    def shutdown(self) -> None:
        """Flush what is batched (the lifespan's end)."""
        if self._provider is not None:
            self._provider.shutdown()


def forward_traceparent(ctx: RequestContext, span: Span | None) -> str:
    """What the replica gets: the request's traceparent, with the forward span as parent when traced."""
    if span is None:
        return ctx.traceparent
    parent = span.get_span_context()
    return f"00-{trace_id(ctx.traceparent)}-{parent.span_id:016x}-01"


def end_span(ctx: RequestContext) -> None:
    """End the request's root span (step 7, finish), with its outcome."""
    span, ctx.span = ctx.span, None
    if span is None:
        return
    span.set_attribute("http.response.status_code", ctx.progress.status)
    span.set_attribute("llmgw.model", ctx.model_label)
    span.set_attribute("llmgw.attempts", ctx.progress.attempts)
    if ctx.progress.replica is not None:
        span.set_attribute("llmgw.replica", ctx.progress.replica.id)
    span.end()
