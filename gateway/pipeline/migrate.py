"""Where the relay (relay.py) hands a generation that may move to the migration room (gateway/migration/):
:func:`moving` makes a movable stream's source (the replica's events, moved to another replica when
it fails; chosen by gateway/pipeline/source.py); :func:`whole_continued` answers a non-streamed one
that may move: read as a stream through the same source, continued token-exact when its replica
fails, assembled into one whole answer; :func:`whole_moving` answers a non-streamed one that cannot
move: run again whole on another replica only once its first replica is known not to be running it
(the registry says its process is gone; a connection that broke after the request was written is a
502, never a second run: gateway/pipeline/forward.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.migration.assemble import Assembler, Incomplete, at_once
from gateway.migration.stream import MigratingStream, ReplicaLeft
from gateway.pipeline.forward import EJECT, NONE, attempt_on, candidates, done, forward
from gateway.replicas.table import Endpoint, ModelPool
from gateway.state import Gateway
from gateway.upstream.client import FAILURES, Upstream, classify
from gateway.values import RequestContext

log = logging.getLogger("llmgw.migration")
CONTINUE_PATH = b"/v1/completions"
WHOLE_READ = 1 << 18
"""The most bytes of a non-streamed answer that may move read before any is recorded (``collect``): an
answer that ends within them (about 1,000 tokens' frames) is assembled in one pass; a longer one is
recorded from there on as it comes, so that its memory stays its ids, not its frames."""
RERUN = "rerun"
"""vLLM's request id suffix of a non-streamed request run again whole (``<id>-rerunN``): a second
generation, not a continuation (``-moveN``): bench/chaos.py counts it as a run."""


def moving(gw: Gateway, ctx: RequestContext, pool: ModelPool, up: Upstream) -> MigratingStream:
    """The source of a generation that may move (its replica said 200): continuations are opened on
    replicas not tried yet, each attempt ended by :func:`~gateway.pipeline.forward.done`."""
    plan = ctx.migration
    assert plan is not None

    async def reopen(body: bytes, tried: list[Endpoint]) -> Upstream:
        """The continuation on a replica not tried yet (the first byte time is the original's)."""
        first_byte_at = ctx.progress.first_byte_at
        try:
            return await attempt_on(gw, ctx, pool, tried, CONTINUE_PATH, body)
        finally:
            ctx.progress.first_byte_at = first_byte_at

    def release(ep: Endpoint, ok: bool, blame: bool) -> None:
        done(gw, ep, ctx, ok, EJECT if blame else NONE)

    return MigratingStream(plan, ctx, pool, up, gw.metrics, gw.settings, reopen, release)


async def whole_continued(
    gw: Gateway, ctx: RequestContext, pool: ModelPool, read: Callable[[Upstream], Awaitable[bytes]]
) -> tuple[bytes, int, int]:
    """A non-streamed generation that may move (sent as a stream with token ids, gateway/migration/
    whole.py): read through a :class:`MigratingStream`, which continues it token-exact on another replica
    when its replica fails, within the request's deadline; the client gets one whole answer in vLLM's
    non-streamed shape (gateway/migration/assemble.py). Returns (body, prompt tokens, completion tokens).
    A refusal (not 200) is ``read`` and passed on as the replica wrote it. The happy case is cheap: the
    answer's bytes are read to its end without recording them (``collect``; none to wait for when the
    replica wrote all of it before its head was read: no stream, no timer) and assembled in one pass
    (``at_once``). Anything else is read again the general way, recorded, before it moves: a failure of
    the reads (after what they read), an answer in another shape (an error frame, a frame that is not
    JSON), or one longer than :data:`WHOLE_READ`."""
    plan = ctx.migration
    assert plan is not None
    up = await _head(gw, ctx, pool)
    ctx.progress.status, ctx.progress.reply_type = up.status, up.content_type
    if up.status != 200:
        body = await read(up)
        return body, 0, 0
    arrived = up.response.arrived
    if arrived:  # its replica wrote it all before its head was read: taken at once, no stream, no timer
        up.first += await up.response.read()  # (nothing waits)
        whole = at_once(plan.chat, plan.keep_ids, up.first)
        if whole is not None:  # in the usual shape: assembled in one pass, nothing to record or move
            assert ctx.progress.replica is not None
            done(gw, ctx.progress.replica, ctx, True, NONE)
            ctx.progress.reply_type = "application/json"
            return whole
    source = moving(gw, ctx, pool, up)  # (the stream's first read: what came, or all of it)
    assembler = Assembler(plan.chat, plan.keep_ids)
    ok = blame = False
    deadline = asyncio.timeout(max(0.0, ctx.progress.deadline - time.perf_counter()))
    try:
        async with deadline:
            raw = None if arrived else await source.collect(WHOLE_READ)
            whole = at_once(plan.chat, plan.keep_ids, raw) if raw is not None else None
            if whole is None:  # anything else: recorded as it is read (what collect read, again)
                chunk = await source.first()
                while chunk:
                    assembler.feed(chunk)
                    chunk = await source.next()
        if whole is None:
            whole = (assembler.body(source.usage()), *assembler.counts(source.usage()))
        ok = True
    except (*FAILURES, Incomplete) as exc:
        assert ctx.progress.replica is not None
        if deadline.expired():
            raise UpstreamTimeout(
                f"the replica at {ctx.progress.replica.url} did not answer in time"
            ) from None
        blame = not isinstance(exc, TimeoutError)  # a stall is not the replica's failure (as a stream)
        raise classify(exc, ctx.progress.replica.url).error from None
    finally:
        source.close(ok, blame)
    ctx.progress.reply_type = "application/json"
    return whole


async def _head(gw: Gateway, ctx: RequestContext, pool: ModelPool) -> Upstream:
    """The stream's head, watched: when the registry says the replica's process is gone, or it failed
    ``lost_after_probes`` health probes in a row (a frozen replica), before its head came, the wait ends
    at once with a clear error (502); one failed probe does not end it. It is not sent again: the
    replica took it and may run it when it wakes (a generation run twice), and no token came that a
    continuation could start from."""
    try:
        with ReplicaWatch(ctx):
            return await forward(gw, ctx, pool)
    except ReplicaLeft as exc:
        raise UpstreamError(f"{exc}; it had not started its answer") from None


class ReplicaWatch:
    """While a non-streamed answer is awaited: on evidence about the replica's work (the registry says
    its process is gone; unless ``process_only``, also ``lost_after_probes`` failed health probes in a
    row), the wait is cancelled and becomes :class:`ReplicaLeft`. One failed probe, or another request's
    broken connection, is no such evidence. Event-driven, no timer: ``ctx.progress.on_gone`` is among
    the awaited replica's watchers (forward.py ``attempt_on``), called by the registry sync and by the
    monitor."""

    __slots__ = ("ctx", "gone", "process_only", "task")

    def __init__(self, ctx: RequestContext, process_only: bool = False) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.ctx, self.task, self.gone, self.process_only = ctx, task, "", process_only

    def __enter__(self) -> None:
        self.gone = ""
        self.ctx.progress.on_gone = self._on_gone

    def _on_gone(self) -> None:
        ep = self.ctx.progress.replica
        if self.process_only and (ep is None or not ep.process_gone):
            return
        if not self.gone:
            gone = ep is not None and ep.process_gone
            why = "is gone (the registry says its process ended)" if gone else "failed its probes in a row"
            self.gone = f"{ep.id if ep is not None else '-'} {why}"
            self.task.cancel()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.ctx.progress.on_gone = None
        if self.gone and kind is asyncio.CancelledError and self.task.uncancel() == 0:
            raise ReplicaLeft(f"the replica {self.gone}") from None


async def whole_moving(
    gw: Gateway, ctx: RequestContext, pool: ModelPool, read: Callable[[Upstream], Awaitable[bytes]]
) -> bytes:
    """A non-streamed generation that cannot move token-exact (n > 1, logprobs, tools, ...: its plan's
    ``reason``), forwarded as the client sent it (read whole by ``read``). It runs again, whole, on a
    replica not tried yet only once its first replica is known not to be running it: the registry says
    its process is gone (it left, restarted or was marked failed) while the answer was awaited; at most
    ``migration_attempts`` times within the request's deadline. A replica that is only frozen or slow
    (failed probes, even ``lost_after_probes`` of them) keeps the request: a 504 at the deadline, never
    a second generation beside the first; a connection that broke after the request was written is
    forward()'s 502. The client has seen nothing of a run again: at temperature 0 or with a seed the
    answer is the undisturbed one; the tokens generated on the failed replica are generated again (vLLM
    request id ``<id>-rerunN``: a second generation, after the first is known to have ended)."""
    plan = ctx.migration
    assert plan is not None and ctx.model is not None
    tried: list[Endpoint] = []
    moves, first_failed, base_id = 0, "", ctx.progress.upstream_id
    watch = ReplicaWatch(ctx, process_only=True)
    while True:
        try:
            with watch:
                up = await forward(gw, ctx, pool, tried)
                ctx.progress.status, ctx.progress.reply_type = up.status, up.content_type
                body = await read(up)
        except ReplicaLeft as exc:  # its process is gone (a broken connection is forward()'s 502)
            failed = ctx.progress.replica
            err = UpstreamError(str(exc))
            if failed is not None and failed not in tried:
                tried.append(failed)
            late = time.perf_counter() >= ctx.progress.deadline
            if moves >= plan.attempts or late or not candidates(ctx, pool, tried):
                gw.metrics.migrations.labels(pool.model, "failed").inc()
                _log(ctx, pool, "failed", first_failed or _id(failed), "-", moves, err.message)
                raise err from None
            moves += 1
            first_failed = first_failed or _id(failed)
            ctx.progress.upstream_id = (
                f"{base_id}-{RERUN}{moves}"  # vLLM's id: a second generation (not -moveN)
            )
            _log(ctx, pool, "re-run", _id(failed), "-", moves, err.message)
            continue
        if moves:
            gw.metrics.migrations.labels(pool.model, "continued").inc()
            _log(ctx, pool, "moved", first_failed, _id(ctx.progress.replica), moves, "answered whole")
        return body


def _id(ep: Endpoint | None) -> str:
    return ep.id if ep is not None else "-"


def _log(ctx: RequestContext, pool: ModelPool, what: str, old: str, new: str, attempt: int, why: str) -> None:
    log.warning(
        "request_id=%s model=%s migration %s: from=%s to=%s offset=0 attempt=%d reason=%s",
        ctx.request_id, pool.model, what, old, new, attempt, why,
    )  # fmt: skip
