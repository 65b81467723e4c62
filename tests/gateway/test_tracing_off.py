"""Tracing off (the default) costs no per-request objects in the tracing steps: a request without a
traceparent gets none (nothing made), every step's span is the one shared no-op, and the forward step's
span builds no attributes (measured with tracemalloc against a step that does nothing)."""

from __future__ import annotations

import contextvars
import time
import tracemalloc
from collections.abc import Callable

from gateway.tracing import NO_SPAN, TRACE_ID, Tracing
from gateway.values import RequestContext

ROUNDS = 50
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def peak_bytes(step: Callable[[], None]) -> int:
    """The most memory ``step`` held at once over ROUNDS calls, beyond what was held before."""
    step()  # caches warmed
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for _ in range(ROUNDS):
            step()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - before


def test_with_tracing_off_every_step_is_the_shared_no_op() -> None:
    tracing = Tracing(False, "http://127.0.0.1:4317", "gw")
    ctx = RequestContext("r1", "chat", b"", {}, time.perf_counter())
    context = contextvars.copy_context()
    context.run(tracing.begin, ctx, "", "")
    assert ctx.span is None and ctx.traceparent == "" and context.run(TRACE_ID.get) == ""
    context.run(tracing.begin, ctx, PARENT, "v=1")  # the client's is kept, and names the log lines
    assert ctx.traceparent == PARENT and ctx.tracestate == "v=1"
    assert context.run(TRACE_ID.get) == PARENT[3:35]
    assert tracing.span(ctx, "authenticate") is NO_SPAN
    ctx.progress.attempts = 2
    assert tracing.attempt_span(ctx, "replica-0") is NO_SPAN


def test_the_forward_span_builds_nothing_with_tracing_off() -> None:
    tracing = Tracing(False, "http://127.0.0.1:4317", "gw")
    ctx = RequestContext("r1", "chat", b"", {}, time.perf_counter())
    ctx.progress.attempts = 1
    replica = "replica-0"

    def plain() -> None:
        with tracing.span(ctx, "pick"):
            pass

    def forward() -> None:
        with tracing.attempt_span(ctx, replica):
            pass

    assert peak_bytes(forward) <= peak_bytes(plain)


def test_a_request_without_a_traceparent_allocates_nothing_with_tracing_off() -> None:
    tracing = Tracing(False, "http://127.0.0.1:4317", "gw")
    ctx = RequestContext("r1", "chat", b"", {}, time.perf_counter())

    def nothing() -> None:
        pass

    def begin() -> None:
        tracing.begin(ctx, "", "")

    assert contextvars.copy_context().run(peak_bytes, begin) <= peak_bytes(nothing)
