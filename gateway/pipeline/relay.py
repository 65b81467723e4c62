"""Steps 5 to 7 for an admitted request, in one async generator that holds its lease from the pick to
the last byte (:func:`~gateway.pipeline.settle.holding`: the one place a lease is released).

:func:`answer`'s first item is the whole body of a non-streamed answer (or of a stream the replica
refused), read before the item is given; for a stream it is ``b""`` once the head is known, then the
stream's chunks as they come. A stream that breaks after it started gets its planned end: an SSE error
event in the API's shape after a complete event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator

from gateway.admission.base import Lease
from gateway.batched_histogram import BatchedHistogram
from gateway.errors import GatewayError, InternalError, ShuttingDown, sse_error_event
from gateway.pipeline.admit import until_awake
from gateway.pipeline.forward import EJECT, NONE, done, forward, wait_s
from gateway.pipeline.migrate import whole_continued, whole_moving
from gateway.pipeline.settle import Usage, holding, usage_of
from gateway.pipeline.source import source_of
from gateway.pipeline.usage import UsageStrip
from gateway.replicas.table import ModelPool
from gateway.responses_api.stored import remember
from gateway.state import Gateway
from gateway.upstream.client import FAILURES, Retryable, Unanswered, Upstream, classify, read_rest
from gateway.values import RequestContext

log = logging.getLogger("llmgw.relay")
RELAY_DEFECT = "the gateway failed while relaying the stream; it was ended"


def streaming(ctx: RequestContext) -> bool:
    """Whether the answer is relayed as a stream (asked for, and the replica said 200)."""
    return ctx.stream and ctx.progress.status == 200


async def answer(
    gw: Gateway, ctx: RequestContext, pool: ModelPool, lease: Lease
) -> AsyncGenerator[bytes, None]:
    async with holding(gw, ctx, lease) as usage:
        if ctx.progress.woken_at is not None:
            await until_awake(gw, ctx, pool)
        got = await whole_or_stream(gw, ctx, pool, usage)
        usage.answered = True
        if isinstance(got, bytes):
            yield got
            return
        source = source_of(gw, ctx, pool, got)  # chosen once: plain, or a stream that may move
        assert ctx.progress.replica is not None and ctx.model is not None
        itl = BatchedHistogram(gw.metrics.itl_of(ctx.model.name))  # the gaps between chunks
        events, tail, ok, blame, ended = 0, b"", True, True, False
        recorded = ctx.api.stored != "create"  # (a stream that may move is a chat or a completion)
        strip = UsageStrip() if source.strips else None

        def end() -> None:  # the gateway is stopping: break the stream to give it its planned end
            nonlocal ended
            ended = True
            source.stop()

        token = gw.open_requests.open(end)
        try:  # from the head on, the attempt ends in the finally below (also for a client gone at the head)
            yield b""
            chunk = await source.first()
            t = time.perf_counter()
            while chunk:
                events += chunk.count(b"data: ")
                tail = tail[-4096:] + chunk
                recorded = recorded or events > 8 or await remember(ctx, gw.affinity, tail)
                out = chunk if strip is None else strip.feed(chunk)
                if out:  # the usage event alone: nothing to send
                    yield out
                chunk = await source.next()
                now = time.perf_counter()
                itl.observe(now - t)
                t = now
            if strip is not None and strip.pending:
                yield strip.rest()
        except FAILURES as exc:
            # a stall is not the replica's failure (it may be busy; a frozen one fails its /health)
            ok, blame = False, not ended and not isinstance(exc, TimeoutError)
            rest = strip.rest() if strip is not None else b""
            yield rest + event_end(tail) + broke(gw, ctx, exc, ended)
        except Exception:  # the gateway's own defect, not the replica's: the stream still gets its end
            ok, blame, ctx.progress.error = False, False, RELAY_DEFECT
            log.exception("request_id=%s model=%s stream relay failed", ctx.request_id, ctx.model.name)
            gw.metrics.stream_errors.labels(ctx.model.name).inc()
            yield event_end(tail) + sse_error_event(InternalError(RELAY_DEFECT), ctx.api.dialect)
        finally:
            itl.flush()
            gw.open_requests.close(token)
            source.close(ok, blame)
            usage.prompt, usage.completion = source.usage(tail, events)


async def whole_or_stream(
    gw: Gateway, ctx: RequestContext, pool: ModelPool, usage: Usage
) -> bytes | Upstream:
    """The whole answer (its usage filled in), or the replica's head of a stream it said 200 to. A
    non-streamed answer whose replica may fail runs again whole when it cannot move token-exact, else
    is read as a stream that moves token-exact and answered whole (gateway/pipeline/migrate.py)."""
    plan = ctx.migration
    if plan is not None and plan.whole:
        if not plan.runs_again:
            body, usage.prompt, usage.completion = await whole_continued(
                gw, ctx, pool, lambda up: read_whole(gw, ctx, up)
            )
            return body
        body = await whole_moving(gw, ctx, pool, lambda up: read_whole(gw, ctx, up))
    else:
        up = await forward(gw, ctx, pool)
        ctx.progress.status, ctx.progress.reply_type = up.status, up.content_type
        if streaming(ctx):
            return up
        body = await read_whole(gw, ctx, up)
    usage.prompt, usage.completion = usage_of(body)
    return body


def broke(gw: Gateway, ctx: RequestContext, exc: BaseException, ended: bool) -> bytes:
    """The error event of a stream that broke after it started (counted, and recorded on ``ctx``)."""
    assert ctx.progress.replica is not None and ctx.model is not None
    err = stream_error(exc, ctx.progress.replica.url, ended)
    ctx.progress.error = f"stream broke after it started: {err.message}"
    gw.metrics.stream_errors.labels(ctx.model.name).inc()
    if ctx.model.migrates and (ctx.migration is None or ctx.migration.reason):
        gw.metrics.migrations.labels(ctx.model.name, "not_movable").inc()
    return sse_error_event(err, ctx.api.dialect)


async def read_whole(gw: Gateway, ctx: RequestContext, up: Upstream) -> bytes:
    assert ctx.progress.replica is not None
    ok, blame = True, True
    wait = wait_s(gw, ctx) if not ctx.stream else gw.settings.chunk_timeout_s
    try:
        body = await read_rest(up, wait, ctx.progress.replica.url)
    except (Retryable, Unanswered) as failed:
        ok, blame = False, isinstance(failed, Retryable)
        raise failed.error from None
    except BaseException:  # cancelled: the client left
        ok, blame = False, False
        raise
    finally:
        done(gw, ctx.progress.replica, ctx, ok, EJECT if blame else NONE)
    await remember(ctx, gw.affinity, body[:4096])
    return body


def stream_error(exc: BaseException, url: str, ended: bool) -> GatewayError:
    if ended:
        return ShuttingDown("the gateway is shutting down; the stream was ended, retry the request")
    return classify(exc, url).error


def event_end(sent: bytes) -> bytes:
    """What ends the SSE event the relayed bytes stopped in (nothing after a blank line), so that an
    error event is never glued onto half an event."""
    if not sent or sent.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")):
        return b""
    if sent.endswith((b"\n", b"\r")):
        return b"\n"
    return b"\n\n"
