"""The admission's Lua scripts (``lua/*.lua``) bound to one Redis client, and what they answer."""

from __future__ import annotations

import asyncio
from enum import IntEnum
from importlib import resources

from contract.redis_keys import RedisKeys
from gateway.admission.base import Ticket
from gateway.admission.order import clamp_priority
from gateway.admission.redis_wire import LeanScript, PipelinedRedis, Reply

Arg = str | int | float
WAITER_GRACE_MS = 2000  # a queued waiter stays grantable this long past its own deadline


class Acquired(IntEnum):
    QUEUED = 0
    GRANTED = 1
    FULL = -1
    GONE = -2


class Left(IntEnum):
    LEFT_QUEUE = 0
    KEPT = 1
    PASSED_ON = 2
    UNKNOWN = 3


def script_source(name: str) -> str:
    lua = resources.files("gateway.admission") / "lua"
    return (lua / "common.lua").read_text() + "\n" + (lua / f"{name}.lua").read_text()


class QueueScripts:
    """The scripts bound to one client; each method names the keys of one model."""

    def __init__(self, redis: PipelinedRedis, keys: RedisKeys, ttl_ms: int) -> None:
        self.keys, self.ttl_ms = keys, ttl_ms
        self._acquire = LeanScript(redis, script_source("acquire"))
        self._leave = LeanScript(redis, script_source("leave"))
        self._release = LeanScript(redis, script_source("release"))
        self._tick = LeanScript(redis, script_source("tick"))
        self._refund = LeanScript(redis, script_source("refund"))

    def _model_keys(self, model: str) -> list[str]:
        k = self.keys
        return [k.leases(model), k.queue(model), k.waiter_meta(model), k.tenant_usage(model)]

    def _wake_prefix(self, model: str) -> str:
        return self.keys.wake(model, "")

    async def acquire(self, t: Ticket, ticket_id: str, capacity: int) -> tuple[Acquired, int]:
        keys = [*self._model_keys(t.model), self.keys.seq(t.model), self.keys.gone(t.model, ticket_id)]
        args: list[Arg] = [
            ticket_id, capacity, self.ttl_ms, t.tenant, clamp_priority(t.priority), max(1, t.cost),
            t.max_queue, int(t.max_wait_s * 1000) + WAITER_GRACE_MS, self._wake_prefix(t.model),
        ]  # fmt: skip
        status, depth = await self._acquire(keys, args)
        return Acquired(int(status)), int(depth)

    async def leave(self, model: str, ticket_id: str, keep: bool, capacity: int) -> Left:
        k = self.keys
        keys = [*self._model_keys(model), k.gone(model, ticket_id), k.wake(model, ticket_id)]
        args: list[Arg] = [ticket_id, int(keep), capacity, self.ttl_ms, self._wake_prefix(model)]
        return Left(int(await self._leave(keys, args)))

    async def release(self, model: str, ticket_id: str, capacity: int) -> tuple[int, int]:
        args: list[Arg] = [ticket_id, capacity, self.ttl_ms, self._wake_prefix(model)]
        removed, granted = await self._release(self._model_keys(model), args)
        return int(removed), int(granted)

    async def refund(self, model: str, tenant: str, tokens: int) -> int:
        """Lower ``tenant``'s fair-share finish tag by ``tokens``; returns the tag after."""
        return int(await self._refund([self.keys.tenant_usage(model)], [tenant, tokens]))

    def release_nowait(
        self, model: str, ticket_id: str, capacity: int, timeout_s: float
    ) -> asyncio.Future[Reply] | None:
        """The release sent without waiting: its reply's future, or None (no connection open yet)."""
        args: list[Arg] = [ticket_id, capacity, self.ttl_ms, self._wake_prefix(model)]
        return self._release.nowait(self._model_keys(model), args, timeout_s)

    async def tick(self, model: str, capacity: int, held: list[str]) -> tuple[int, int, list[str]]:
        """Renew ``held``; returns (queue depth, active leases, the held ids Redis no longer had)."""
        args: list[Arg] = [capacity, self.ttl_ms, self._wake_prefix(model), *held]
        out = await self._tick(self._model_keys(model), args)
        return int(out[0]), int(out[1]), [m.decode() if isinstance(m, bytes) else str(m) for m in out[2:]]
