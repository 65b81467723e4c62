"""The relay's source for a stream that may move: reads the replica event by event (token ids recorded
and stripped), and when the replica fails after the first byte (connection reset or EOF, an error or
malformed frame, a stall: no token within the replica's learned stall bound while its own signals show no
progress either, the replica leaving the registry) continues the
generation on another replica of the model, at most ``migration_attempts`` times within the request's
deadline. Past that, the failure goes to the relay, which ends the stream as it does today (the SSE error
event)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import orjson

from gateway.errors import GatewayError
from gateway.metrics import GatewayMetrics
from gateway.migration.frames import EventSplitter
from gateway.migration.plan import MOVABLE_PATHS, continuation, why_not
from gateway.migration.record import MalformedFrame, Recorder
from gateway.migration.seam import Diverged, Seam, ending
from gateway.replicas.table import Endpoint, ModelPool
from gateway.settings import GatewaySettings
from gateway.upstream.client import FAILURES, Retryable, Upstream
from gateway.upstream.http1 import UpstreamClosed
from gateway.values import MigrationPlan, RequestContext
from llmgw_contract.fleet import Model

log = logging.getLogger("llmgw.migration")


class ReplicaLeft(UpstreamClosed):
    """The replica serving the stream left the registry while the stream waited for it."""


class MigrationFailed(UpstreamClosed):
    """No replica could continue the stream (or the continuation differs from what the client saw)."""


def plan_migration(ctx: RequestContext, model: Model) -> MigrationPlan | None:
    """The plan of a streamed generation of a model that migrates; None for any other request. A
    stream that may move is sent asking for token ids (written in the body by gateway/pipeline/body.py).
    (A non-streamed request's plan is gateway/migration/whole.py's.)"""
    if not model.migrates or ctx.api.name not in MOVABLE_PATHS:
        return None
    payload = ctx.payload if ctx.payload is not None else orjson.loads(ctx.body)
    adapter = ctx.model_name not in (model.name, *model.aliases)
    plan = MigrationPlan(payload, why_not(payload, ctx.api.name, adapter), ctx.api.name == "chat/completions")
    if plan.reason:
        return plan
    options = payload.get("stream_options")
    # usage asked by the client, or by the gateway for its accounting (ctx.strip_usage: parse.py)
    plan.usage = ctx.strip_usage or (isinstance(options, dict) and bool(options.get("include_usage")))
    plan.keep_ids, plan.attempts = bool(payload.get("return_token_ids")), model.migration_attempts
    return plan


Reopen = Callable[[bytes, list[Endpoint]], Awaitable[Upstream]]
Release = Callable[[Endpoint, bool, bool], None]


class MigratingStream:
    """Gives the relay the client's bytes (:meth:`first`, then :meth:`next` until b''); :meth:`close`
    ends the attempt on the replica that serves it last. ``reopen`` opens a continuation on a replica not
    in the list (adding it); ``release(replica, ok, blame)`` ends the attempt on one. A source of the
    relay (gateway/pipeline/source.py)."""

    strips = False
    """The usage event the gateway asked for itself is dropped here (by the recorder), not by the relay."""

    def __init__(
        self,
        plan: MigrationPlan,
        ctx: RequestContext,
        pool: ModelPool,
        up: Upstream,
        metrics: GatewayMetrics,
        settings: GatewaySettings,
        reopen: Reopen,
        release: Release,
    ) -> None:
        self.plan, self.ctx, self.pool, self.up = plan, ctx, pool, up
        self.metrics, self.settings, self.reopen, self.release = metrics, settings, reopen, release
        assert ctx.progress.replica is not None
        self.current: Endpoint = ctx.progress.replica
        self.tried: list[Endpoint] = [ctx.progress.replica]
        self.recorder = Recorder(keep_ids=plan.keep_ids, drop_usage=ctx.strip_usage and not plan.whole)
        self.splitter = EventSplitter()
        self.seam: Seam | None = None
        self.pending: bytes | None = up.first
        self.moves, self.over, self.closed = 0, False, False
        self.stall_from: float | None = None
        self.wait_started: float | None = None
        self.outcome = ""
        self.failure: Exception | None = None
        self.deferred: Exception | None = None
        """The failure that ended :meth:`collect`'s reads: raised once what they read was read again."""
        self.base_id = ctx.progress.upstream_id
        self.stopping = False
        self.read_from = 0.0
        """When the read in progress began (the stall is counted from it: :meth:`_watch`)."""
        self.gap_from = 0.0
        """When the last read from the current replica began (0: none since it became current)."""
        self.timer: asyncio.TimerHandle | None = None

    async def first(self) -> bytes:
        return await self._next()

    async def collect(self, limit: int) -> bytes | None:
        """The original stream's bytes, read to the end of the replica's answer without recording them
        (a non-streamed answer that may move, assembled whole: gateway/pipeline/migrate.py); None when
        its reads failed or passed ``limit`` bytes. What they read is kept as the next read either way:
        :meth:`first` reads it again the general way (recorded), then the failure, if one ended them
        (so the recorder has every byte before the generation moves)."""
        parts, size = [], 0
        try:
            while size <= limit:
                data = await self._read()
                if not data:
                    break
                parts.append(data)
                size += len(data)
        except FAILURES as exc:
            self.deferred = exc
        self.pending = b"".join(parts) if parts else None
        return self.pending if self.deferred is None and size <= limit else None

    async def next(self) -> bytes:
        """The next bytes for the client; b'' at the end. Raises a failure it could not move past.
        The common case (one whole event of the original stream) is read here; anything else goes the
        general way (:meth:`_next`: several one-token frames read together are recorded at once).
        No timer per chunk: one watchdog per stream (:meth:`_watch`)."""
        if self.pending is None and self.failure is None and self.seam is None and self.deferred is None:
            try:
                data = await self._chunk()
            except FAILURES as exc:
                self.failure = exc
            else:
                # one whole event: a single line (JSON has no raw newline) and the blank line after it
                if data and data.find(b"\n") == len(data) - 2 and data[-1] == 10 and not self.splitter.rest:
                    try:
                        out = self.recorder.original(data)
                    except MalformedFrame as exc:
                        self.failure = exc
                    else:
                        if out:  # (an event the client does not get, the gateway's own usage: read on)
                            return out
                else:  # several events read together, or part of one: the general way
                    self.pending = data
        return await self._next()

    async def _next(self) -> bytes:
        while not self.over:
            try:
                if self.failure is not None:
                    failure, self.failure = self.failure, None
                    raise failure
                data = await self._read()
                if not data:
                    if not self.recorder.done:
                        raise UpstreamClosed("the replica ended the stream before [DONE]")
                    self.over = True
                    return b""
                out = self._take(data)
            except MigrationFailed:
                raise
            except (*FAILURES, MalformedFrame) as exc:
                out = await self._move(exc)
            if out:
                return out
        return b""

    def usage(self, sent: bytes = b"", events: int = 0) -> tuple[int, int]:
        """(prompt, completion) tokens as recorded (what the relay sent is not needed)."""
        return self.recorder.usage()

    def stop(self) -> None:
        """The gateway is stopping: break the stream where it is (the relay gives it its planned end)."""
        self.stopping = True
        self.up.response.close()

    def close(self, ok: bool, blame: bool) -> None:
        """The stream ended (``ok``) or broke: end the attempt on the replica that served it last."""
        if self.closed:
            return
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.up.response.close()
        self.release(self.current, ok, blame)
        if self.moves or self.outcome:
            outcome = self.outcome or ("continued" if ok else "failed")
            self.metrics.migrations.labels(self.pool.model, outcome).inc()

    def _take(self, data: bytes) -> bytes:
        parts: list[bytes] = []
        if self.seam is None:  # the original stream: frames of one token read together go at once
            try:
                head, block = self.recorder.bulk(self.splitter.block(data))
            except MalformedFrame as exc:
                self.failure = exc
                return self._raise_failure()
            parts.append(head)
            events = [e + b"\n\n" for e in block.split(b"\n\n") if e] if block else []
        else:
            events = self.splitter.feed(data)
        try:
            for event in events:
                parts += [self.recorder.original(event)] if self.seam is None else self.seam.feed(event)
        except Diverged as exc:
            self.outcome = "failed"
            self.failure = MigrationFailed(str(exc))
        except MalformedFrame as exc:  # what came before it goes out first
            self.failure = exc
        out = b"".join(parts)
        if self.failure is not None and not out:
            return self._raise_failure()
        if out and self.stall_from is not None:
            self.metrics.migration_stall.labels(self.pool.model).observe(
                time.perf_counter() - self.stall_from
            )
            self.stall_from = None
        return out

    def _raise_failure(self) -> bytes:
        failure, self.failure = self.failure, None
        assert failure is not None
        raise failure

    async def _read(self) -> bytes:
        """The next chunk from the replica (the watchdog, :meth:`_watch`, interrupts a stalled read)."""
        if self.pending is not None:
            data, self.pending = self.pending, None
            return data
        if self.deferred is not None:
            deferred, self.deferred = self.deferred, None
            raise deferred
        return await self._chunk()

    async def _chunk(self) -> bytes:
        """The replica's next chunk. The watchdog starts with the first read that may wait (a stream
        whose whole answer came with its head, as the FAKE ENGINE writes it, needs none). The time since
        the read before is one of the replica's gaps between tokens (its stall bound is learned from
        them)."""
        now = time.perf_counter()
        if self.gap_from:
            self.current.gaps.add(now - self.gap_from)
        self.read_from = self.gap_from = now
        if self.timer is None and not self.up.response.arrived:
            self._arm(self.settings.migration_watch_s)
        return await self.up.response.next_chunk()

    def _arm(self, delay: float) -> None:
        self.timer = asyncio.get_running_loop().call_later(max(delay, 0.001), self._watch)

    def _watch(self) -> None:
        """The stream's watchdog, every ``migration_watch_s`` from its first read that may wait until it
        ends (not a timer per chunk):
        while a read waits for the replica, the replica must still be registered, and the wait must stay
        under ``chunk_timeout_s``, and under the stall bound learned from the replica's gaps between
        tokens (``migration_stall_gap_factor`` × their p99, at least ``migration_stall_s``) unless the
        replica's own signals show progress (gateway/replicas/progress.py: a busy replica, prefilling
        other clients' prompts, is not moved from) or there is nowhere to move; else the read is
        interrupted (:class:`ReplicaLeft`, :class:`TimeoutError`) and the stream moves."""
        self.timer = None
        if self.closed or self.over:
            return
        s, next_in, ep = self.settings, self.settings.migration_watch_s, self.current
        waited = time.perf_counter() - self.read_from  # (stale when no read waits: nothing then)
        bound = min(s.migration_stall_s, s.chunk_timeout_s)
        if waited >= bound:  # (the learned bound is never under the floor: worked out only past it)
            bound = min(ep.gaps.bound(s.migration_stall_s, s.migration_stall_gap_factor), s.chunk_timeout_s)
        exc: Exception | None = None
        if ep not in self.pool.endpoints:
            exc = ReplicaLeft(f"the replica {ep.id} left the registry")
        elif waited >= s.chunk_timeout_s:
            exc = TimeoutError(f"no token from {ep.id} within {s.chunk_timeout_s:g} s")
        elif waited >= bound and self._elsewhere() and ep.progress.quiet_since(self.read_from, bound):
            exc = TimeoutError(f"no token from {ep.id} within {bound:.3g} s, nor progress in its metrics")
        elif waited < bound:
            next_in = min(next_in, bound - waited)
        if exc is not None and self.up.response.interrupt(exc):  # only a read that waits is interrupted
            self.wait_started = self.read_from
        self._arm(next_in)

    def _elsewhere(self) -> bool:
        return bool(self.pool.candidates(exclude=self.tried)) and self.moves < self.plan.attempts

    async def _move(self, exc: BaseException) -> bytes:
        """Continue after ``exc`` on another replica; returns what the client gets at once (the end
        when the last token had come). Raises when it cannot."""
        if self.stopping:
            raise exc if isinstance(exc, FAILURES) else MigrationFailed(str(exc))
        rec, old = self.recorder, self.current
        rec.analyse()
        blame = not isinstance(exc, TimeoutError)  # a stall may be a busy replica: moved from, not ejected
        if rec.finished:
            self.outcome, self.over = "ended", True
            self._log("ended", old, None, exc)
            return b"".join(ending(rec, self.plan.usage))
        prompt_ids = rec.prompt_ids
        if prompt_ids is None:
            self.outcome = "failed"
            raise exc if isinstance(exc, FAILURES) else MigrationFailed(str(exc))
        # the stall counts from the last event: the start of the wait that failed, or now (a reset, EOF)
        self.stall_from = self.stall_from or self.wait_started or time.perf_counter()
        self.wait_started = None
        while self.moves < self.plan.attempts and time.perf_counter() < self.ctx.progress.deadline:
            self.moves += 1
            body = continuation(self.plan.payload, str(self.plan.payload.get("model")), prompt_ids,
                                rec.ids[: rec.clean], self.plan.usage)  # fmt: skip
            # vLLM's request id for the continuation: the original's with -moveN (one generation, in parts)
            self.ctx.progress.upstream_id = f"{self.base_id}-move{self.moves}"
            try:
                up = await self.reopen(body, self.tried)
            except Retryable:
                continue
            except GatewayError:
                break
            self.up.response.close()
            self.release(old, False, blame)
            assert self.ctx.progress.replica is not None
            self.current, self.up, self.pending = self.ctx.progress.replica, up, up.first
            self.gap_from = 0.0  # (the wait across the move is no gap of the new replica's)
            self.seam, self.splitter = Seam(rec, self.plan.chat), EventSplitter()
            self._log("moved", old, self.current, exc)
            return b""
        self.ctx.progress.replica = old  # the error names the replica that failed; close() releases it
        self.outcome = "failed"
        self._log("failed", old, None, exc)
        raise exc if isinstance(exc, FAILURES) else MigrationFailed(str(exc))

    def _log(self, what: str, old: Endpoint, new: Endpoint | None, exc: BaseException) -> None:
        log.warning(
            "request_id=%s model=%s migration %s: from=%s to=%s offset=%d attempt=%d reason=%s",
            self.ctx.request_id, self.pool.model, what, old.id, new.id if new else "-",
            self.recorder.clean, self.moves, str(exc) or type(exc).__name__,
        )  # fmt: skip
