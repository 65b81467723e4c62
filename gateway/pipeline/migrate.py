"""Where the relay (relay.py) hands a generation that may move to the migration room (gateway/migration/):
:func:`source_for` makes its stream's source (the replica's events, moved to another replica when it
fails), :func:`read_moving` reads a non-streamed answer through it, whole."""

from __future__ import annotations

import asyncio
import time

from gateway.errors import UpstreamTimeout
from gateway.migration.stream import MigratingStream
from gateway.pipeline.forward import EJECT, NONE, attempt_on, done
from gateway.replicas.table import Endpoint, ModelPool
from gateway.state import Gateway
from gateway.upstream.client import FAILURES, Upstream, classify
from gateway.values import RequestContext

CONTINUE_PATH = b"/v1/completions"


def source_for(gw: Gateway, ctx: RequestContext, pool: ModelPool, up: Upstream) -> MigratingStream | None:
    """The source of an answer that may move (its plan says so and the replica said 200); else None."""
    plan = ctx.migration
    if plan is None or plan.reason or up.status != 200:
        return None

    async def reopen(body: bytes, tried: list[Endpoint]) -> Upstream:
        """The continuation on a replica not tried yet (the first byte time is the original's)."""
        ctx.body, first_byte_at = body, ctx.first_byte_at
        try:
            return await attempt_on(gw, ctx, pool, tried, CONTINUE_PATH)
        finally:
            ctx.first_byte_at = first_byte_at

    def release(ep: Endpoint, ok: bool, blame: bool) -> None:
        done(gw, ep, ctx, ok, EJECT if blame else NONE)

    return MigratingStream(plan, ctx, pool, up, gw.metrics, gw.settings, reopen, release)


async def read_moving(ctx: RequestContext, source: MigratingStream) -> bytes:
    """A non-streamed answer read from the stream asked in its place, within the total deadline; the
    attempt on its last replica ends here."""
    assert ctx.replica is not None
    ok = blame = False
    try:
        async with asyncio.timeout(max(0.0, ctx.deadline - time.perf_counter())):
            body = await source.whole()
        ok = True
    except TimeoutError:
        raise UpstreamTimeout(f"the replica at {ctx.replica.url} did not answer in time") from None
    except FAILURES as exc:
        blame = True
        raise classify(exc, ctx.replica.url).error from None
    finally:
        source.close(ok, blame)
    ctx.reply_type = "application/json"
    return body
