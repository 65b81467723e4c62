"""Tracing off (the default) costs no per-request objects in the tracing steps: every step's span is the
one shared no-op, and the forward step's span builds no attributes (measured with tracemalloc against a
step that passes none)."""

from __future__ import annotations

import contextvars
import time
import tracemalloc
from collections.abc import Callable

from gateway.tracing import NO_SPAN, Tracing
from gateway.values import RequestContext

ROUNDS = 50


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
    contextvars.copy_context().run(tracing.begin, ctx, "", "")  # its log trace id stays in that context
    assert ctx.span is None and ctx.traceparent
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
