"""A streamed request held for a model at zero replicas: the stream's head at once, SSE comments while
the model starts, then the answer's events.

A held request may wait minutes (a cold start), longer than many proxies and clients keep a silent
connection. So a streamed one is answered at once: the head (200, ``text/event-stream``) goes out with a
first comment (``: waiting for <model>, eta <s> s``; the one-write edge sends both in one write), another
comment follows every ``hold_comment_s``, and once a replica took the request its events follow as
:func:`~gateway.pipeline.relay.answer` relays them. What would have been an error answer after the head
(the hold timed out, the replica refused the request) is the stream's planned end instead: one error
event in the API's shape (gateway/errors.py's :func:`~gateway.errors.sse_error_event`). SSE clients
(the ``openai`` SDK among them) skip comment lines.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator

from gateway.errors import GatewayError, InternalError, ShuttingDown, sse_error_event
from gateway.on_demand.hold import Eta
from gateway.pipeline.admit import admit
from gateway.pipeline.relay import answer, streaming
from gateway.pipeline.settle import finish, refund
from gateway.replicas.table import ModelPool
from gateway.state import Gateway
from gateway.values import RequestContext

log = logging.getLogger("llmgw.proxy")


def comment(model: str, eta_s: float | None) -> bytes:
    """One SSE comment line for a held stream (ignored by SSE parsers, it keeps the connection alive)."""
    eta = "unknown" if eta_s is None else f"{eta_s:.0f} s"
    return f": waiting for {model}, eta {eta}\n\n".encode()


def refused_event(body: bytes, ctx: RequestContext) -> bytes:
    """The replica's own error answer (it refused the stream after the head went out) as an error event:
    the JSON on one data line (newlines between its tokens are whitespace)."""
    data = b" ".join(body.split())
    if ctx.api.dialect == "anthropic":
        return b"event: error\ndata: " + data + b"\n\n"
    return b"data: " + data + b"\n\ndata: [DONE]\n\n"


async def held_stream(
    gw: Gateway, ctx: RequestContext, pool: ModelPool, eta: Eta
) -> AsyncGenerator[bytes, None]:
    """The held stream's bytes; the response that sends them ends this generator when the client leaves
    (the request then leaves the queue through admission's watch, ``leave``). The stopping gateway ends
    a held request with ShuttingDown."""
    assert ctx.model is not None
    model, loop = ctx.model.name, asyncio.get_running_loop()
    started, told = loop.time(), eta.remaining_s if eta.remaining_s > 0 else None
    leave: asyncio.Future[None] = loop.create_future()  # the admission's watch: set to leave the queue
    admitting = asyncio.ensure_future(admit(gw, ctx, pool, leave, eta))
    stopping: list[bool] = []

    def end() -> None:
        stopping.append(True)
        if not leave.done():
            leave.set_result(None)

    token, held = gw.open_requests.open(end), True
    parts: AsyncGenerator[bytes, None] | None = None
    try:
        yield comment(model, told)
        while not admitting.done():
            await asyncio.wait((admitting,), timeout=gw.settings.hold_comment_s)
            if not admitting.done():
                left = None if told is None else max(1.0, told - (loop.time() - started))
                yield comment(model, left)
        if stopping and admitting.exception() is not None:
            raise ShuttingDown("the gateway is shutting down; retry the request", retry_after=1.0)
        parts = answer(gw, ctx, pool, admitting.result())
        held = False
        gw.open_requests.close(token)  # from here the relay gives the stream its planned end
        first = await anext(parts)  # the head is known: b"" for a stream, else the replica's whole answer
        if not streaming(ctx):
            log.info("request_id=%s model=%s the replica refused the held stream: %d",
                     ctx.request_id, model, ctx.progress.status)  # fmt: skip
            yield refused_event(first, ctx)
            return
        async for chunk in parts:
            yield chunk
    except GatewayError as err:
        await ended(gw, ctx, err)
        yield sse_error_event(err, ctx.api.dialect)
    except Exception:  # the gateway's own defect: the stream still gets its planned end
        log.exception("request_id=%s model=%s held stream failed", ctx.request_id, model)
        defect = InternalError("the gateway failed while holding the stream; it was ended")
        await ended(gw, ctx, defect)
        yield sse_error_event(defect, ctx.api.dialect)
    finally:
        if held:
            gw.open_requests.close(token)
        if not leave.done():  # the client left (this generator was closed): the queue is left, as for
            leave.set_result(None)  # any request whose client leaves while it waits (admit's watch)
        lease = (await asyncio.gather(admitting, return_exceptions=True))[0]
        if parts is None and not isinstance(lease, BaseException):  # granted as the client left
            await lease.release()
        elif parts is None and isinstance(lease, GatewayError) and not stopping:  # 499, recorded
            await ended(gw, ctx, lease)
        if parts is not None:
            await parts.aclose()


async def ended(gw: Gateway, ctx: RequestContext, err: GatewayError) -> None:
    """A held stream that ends before a replica answered: refunded and recorded as its error (what
    :meth:`~gateway.pipeline.proxy.Proxy.fail` does for an answer not yet started)."""
    await refund(gw, ctx, 0, 0)
    ctx.progress.status, ctx.progress.error = err.status, err.message
    finish(ctx, gw.metrics)
    log.info("request_id=%s model=%s held stream ended: %s", ctx.request_id, ctx.model_label, err.message)
