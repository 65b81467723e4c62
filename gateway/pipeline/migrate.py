"""Where the relay (relay.py) hands a generation that may move to the migration room (gateway/migration/):
:func:`source_for` makes its stream's source (the replica's events, moved to another replica when it
fails); :func:`whole_moving` answers a non-streamed one, run again on another replica when its replica
fails before answering."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from gateway.errors import UpstreamError
from gateway.migration.stream import MigratingStream, ReplicaLeft
from gateway.pipeline.forward import EJECT, NONE, attempt_on, candidates, done, forward
from gateway.replicas.table import Endpoint, ModelPool
from gateway.state import Gateway
from gateway.upstream.client import Retryable, Upstream
from gateway.values import RequestContext

log = logging.getLogger("llmgw.migration")
CONTINUE_PATH = b"/v1/completions"


def source_for(gw: Gateway, ctx: RequestContext, pool: ModelPool, up: Upstream) -> MigratingStream | None:
    """The source of a stream that may move (its plan says so and the replica said 200); else None."""
    plan = ctx.migration
    if plan is None or plan.reason or plan.whole or up.status != 200:
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


class ReplicaWatch:
    """While a non-streamed answer is awaited: if its replica leaves the registry or is ejected (its
    /health failed, or another request broke there), the wait is cancelled and becomes
    :class:`ReplicaLeft`. Event-driven, no timer: ``ctx.on_gone`` is among the awaited replica's
    watchers (forward.py ``attempt_on``), called by the registry sync and by ejection."""

    __slots__ = ("ctx", "gone", "task")

    def __init__(self, ctx: RequestContext) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.ctx, self.task, self.gone = ctx, task, ""

    def __enter__(self) -> None:
        self.gone = ""
        self.ctx.on_gone = self._on_gone

    def _on_gone(self) -> None:
        if not self.gone:
            self.gone = self.ctx.replica.id if self.ctx.replica is not None else "-"
            self.task.cancel()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.ctx.on_gone = None
        if self.gone and kind is asyncio.CancelledError and self.task.uncancel() == 0:
            raise ReplicaLeft(f"the replica {self.gone} left the registry or was ejected") from None


async def whole_moving(
    gw: Gateway, ctx: RequestContext, pool: ModelPool, read: Callable[[Upstream], Awaitable[bytes]]
) -> bytes:
    """A non-streamed generation that may move, forwarded as the client sent it (read whole by
    ``read``). When its replica fails before the answer (the connection broke, or the replica left the
    registry or was ejected while the answer was awaited), it runs again, whole, on a replica not tried
    yet, at most ``migration_attempts`` times within the request's deadline. The client has seen nothing
    of it: at temperature 0 or with a seed the answer is the undisturbed one; the tokens generated on the
    failed replica are generated again."""
    plan = ctx.migration
    assert plan is not None and ctx.model is not None
    tried: list[Endpoint] = []
    moves, first_failed, base_id = 0, "", ctx.upstream_id
    watch = ReplicaWatch(ctx)
    while True:
        try:
            with watch:
                up = await forward(gw, ctx, pool, tried)
                ctx.status, ctx.reply_type = up.status, up.content_type
                body = await read(up)
        except (ReplicaLeft, Retryable) as exc:  # it broke after it was sent, or its replica went away
            failed = ctx.replica
            err = exc.error if isinstance(exc, Retryable) else UpstreamError(str(exc))
            if failed is not None and failed not in tried:
                tried.append(failed)
            late = time.perf_counter() >= ctx.deadline
            if moves >= plan.attempts or late or not candidates(ctx, pool, tried):
                gw.metrics.migrations.labels(pool.model, "failed").inc()
                _log(ctx, pool, "failed", first_failed or _id(failed), "-", moves, err.message)
                raise err from None
            moves += 1
            first_failed = first_failed or _id(failed)
            ctx.upstream_id = f"{base_id}-move{moves}"  # vLLM's id: as a stream's continuation (stream.py)
            _log(ctx, pool, "re-run", _id(failed), "-", moves, err.message)
            continue
        if moves:
            gw.metrics.migrations.labels(pool.model, "continued").inc()
            _log(ctx, pool, "moved", first_failed, _id(ctx.replica), moves, "answered whole")
        return body


def _id(ep: Endpoint | None) -> str:
    return ep.id if ep is not None else "-"


def _log(ctx: RequestContext, pool: ModelPool, what: str, old: str, new: str, attempt: int, why: str) -> None:
    log.warning(
        "request_id=%s model=%s migration %s: from=%s to=%s offset=0 attempt=%d reason=%s",
        ctx.request_id, pool.model, what, old, new, attempt, why,
    )  # fmt: skip
