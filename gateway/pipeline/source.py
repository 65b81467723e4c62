"""Where a relayed stream's bytes come from: one :class:`Source`, chosen once per stream by
:func:`source_of`, so that the relay (relay.py) is one loop that calls it.

Two sources exist: :class:`PlainSource`, the replica's bytes as they come (the fast path: no record,
no move), and :class:`~gateway.migration.stream.MigratingStream`, a stream that may move to another
replica mid-way (token ids recorded, continued on another replica when its replica fails).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from gateway.pipeline.forward import EJECT, NONE, done
from gateway.pipeline.migrate import moving
from gateway.pipeline.settle import stream_usage
from gateway.replicas.table import ModelPool
from gateway.state import Gateway
from gateway.upstream.client import Upstream, next_chunk
from gateway.values import RequestContext


class Source(Protocol):
    """What the relay reads a stream from: :meth:`first`, then :meth:`next` until b''; both raise the
    failure the source could not get past."""

    strips: bool
    """The relay takes the gateway's own usage event out of the client's stream (a source that does it
    itself says False)."""

    async def first(self) -> bytes: ...

    def next(self) -> Awaitable[bytes]: ...

    def stop(self) -> None:
        """The gateway is stopping: break the stream where it is (the relay gives it its planned end)."""

    def close(self, ok: bool, blame: bool) -> None:
        """The stream ended (``ok``) or broke (``blame``: the replica's fault): its attempt ends."""

    def usage(self, sent: bytes, events: int) -> tuple[int, int]:
        """(prompt, completion) tokens, given the last bytes relayed and the count of events relayed."""


def source_of(gw: Gateway, ctx: RequestContext, pool: ModelPool, up: Upstream) -> Source:
    """The source of a stream whose replica said 200: one that may move when its plan says so (a
    movable stream: gateway/migration/), else the replica's bytes as they come."""
    plan = ctx.migration
    if plan is None or plan.reason or plan.whole:
        return PlainSource(gw, ctx, up)
    return moving(gw, ctx, pool, up)


class PlainSource:
    """The replica's stream as it comes, each chunk within ``chunk_timeout_s``; its usage is the last
    usage event relayed, else the count of events less the ``[DONE]``."""

    __slots__ = ("chunk_s", "ctx", "gw", "strips", "up")

    def __init__(self, gw: Gateway, ctx: RequestContext, up: Upstream) -> None:
        self.gw, self.ctx, self.up = gw, ctx, up
        self.strips, self.chunk_s = ctx.strip_usage, gw.settings.chunk_timeout_s

    async def first(self) -> bytes:
        return self.up.first

    def next(self) -> Awaitable[bytes]:
        return next_chunk(self.up, self.chunk_s)

    def stop(self) -> None:
        self.up.response.close()

    def close(self, ok: bool, blame: bool) -> None:
        self.up.response.close()
        assert self.ctx.progress.replica is not None
        done(self.gw, self.ctx.progress.replica, self.ctx, ok, EJECT if blame else NONE)

    def usage(self, sent: bytes, events: int) -> tuple[int, int]:
        prompt, completion = stream_usage(sent)
        return prompt, completion or max(0, events - 1)
