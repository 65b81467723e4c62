"""The admission queue's Lua scripts (``lua/*.lua``), bound to one pipelined connection and key prefix.

Each method names the keys of one model, all under the model's hash tag: every call touches one Redis
Cluster slot. A ticket id is ``<instance>:<random>``, where the instance is one process of a gateway,
``<gateway id>/<boot nonce>`` (:func:`instance_id`); the scripts read the instance from it, to grant only to
waiters whose instance's presence stamp (``RedisKeys.alive``) holds. Liveness is per process: a gateway
restarted under the same id (compose, the stack keeper and Kubernetes reuse it) does not keep its dead
predecessor's waiters and leases alive.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from enum import IntEnum
from importlib import resources

from gateway.admission.base import Ticket
from gateway.admission.order import clamp_priority
from gateway.admission.redis_wire import LeanScript, PipelinedRedis, Reply
from gateway.admission.resp import Head, Part
from llmgw_contract.redis_keys import RedisKeys

Arg = str | int | float
WAITER_GRACE_MS = 2000  # a queued waiter stays grantable this long past its own deadline
RENEWS_PER_TTL = 3  # a gateway renews its leases three times per TTL; a grant waits one renewal for pick-up
DEFAULT_PRESENCE_MS = 2000


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


def instance_id(gateway_id: str) -> str:
    """A fresh id for one process of the gateway ``gateway_id``: ``<gateway id>/<boot nonce>``."""
    return f"{gateway_id}/{os.urandom(6).hex()}"


def ticket_id(instance: str, token: str) -> str:
    """A ticket's id: the scripts read its instance back from the part before the last ``:``."""
    return f"{instance}:{token}"


@dataclass(frozen=True, slots=True)
class ModelKeys:
    """One model's admission keys: the five every script takes first (leases, queue, waiter meta,
    tenant usage, alive), its grant sequence and the prefix of its waiters' wake lists; and the calls
    of every request (acquire, release, the fair-share refund) with their fixed keys encoded once."""

    first: tuple[str, ...]
    seq: str
    wake_prefix: str
    acquire: Head
    release: Head
    refund: Head


class QueueScripts:
    """The scripts bound to one client. ``ttl_ms`` is a lease's life between renewals; a grant must be
    claimed within one renewal (``ttl_ms / RENEWS_PER_TTL``); ``presence_ms`` is how long a gateway's
    presence stamp holds after its last beat or acquire."""

    def __init__(
        self, redis: PipelinedRedis, keys: RedisKeys, ttl_ms: int, presence_ms: int = DEFAULT_PRESENCE_MS
    ) -> None:
        self.keys, self.ttl_ms, self.presence_ms = keys, ttl_ms, presence_ms
        self.pickup_ms = max(1, ttl_ms // RENEWS_PER_TTL)
        self._acquire = LeanScript(redis, script_source("acquire"))
        self._leave = LeanScript(redis, script_source("leave"))
        self._release = LeanScript(redis, script_source("release"))
        self._tick = LeanScript(redis, script_source("tick"))
        self._refund = LeanScript(redis, script_source("refund"))
        self._claim = LeanScript(redis, script_source("claim"))
        self._beat = LeanScript(redis, script_source("beat"))
        self._names: dict[str, ModelKeys] = {}

    def _named(self, model: str) -> ModelKeys:
        """The model's key names (written once per model: a script call runs on every request)."""
        named = self._names.get(model)
        if named is None:
            k = self.keys
            first = (
                k.leases(model),
                k.queue(model),
                k.waiter_meta(model),
                k.tenant_usage(model),
                k.alive(model),
            )
            seq = k.seq(model)
            named = self._names[model] = ModelKeys(
                first,
                seq,
                k.wake(model, ""),
                self._acquire.bind([*first, seq], more_keys=1),  # then the ticket's gone key
                self._release.bind(first),
                self._refund.bind([k.tenant_usage(model)]),
            )
        return named

    def _model_keys(self, model: str) -> list[str]:
        return list(self._named(model).first)

    def _wake_prefix(self, model: str) -> str:
        return self._named(model).wake_prefix

    async def acquire(
        self, t: Ticket, ticket: str, capacity: int, requeued: bool = False
    ) -> tuple[Acquired, int]:
        """Grant or queue ``ticket``; ``requeued``: its grant was reclaimed before it picked it up, and the
        fair-share charge of its first queueing is given back as it queues again."""
        named, cost = self._named(t.model), max(1, t.cost)
        rest: list[Part] = [
            self.keys.gone(t.model, ticket),
            ticket, capacity, self.ttl_ms, t.tenant, clamp_priority(t.priority), cost,
            t.max_queue, int(t.max_wait_s * 1000) + WAITER_GRACE_MS, named.wake_prefix,
            self.pickup_ms, self.presence_ms, cost if requeued else 0,
        ]  # fmt: skip
        status, depth = await self._acquire.call_bound(named.acquire, rest)
        return Acquired(int(status)), int(depth)

    async def claim(self, model: str, ticket: str) -> bool:
        """Take a grant (its pick-up expiry becomes the lease TTL); False: it was reclaimed meanwhile."""
        return bool(await self._claim([self.keys.leases(model)], [ticket, self.ttl_ms]))

    async def leave(self, model: str, ticket: str, keep: bool, capacity: int) -> Left:
        k = self.keys
        keys = [*self._model_keys(model), k.gone(model, ticket), k.wake(model, ticket)]
        args: list[Arg] = [ticket, int(keep), capacity, self.ttl_ms, self._wake_prefix(model), self.pickup_ms]
        return Left(int(await self._leave(keys, args)))

    async def release(self, model: str, ticket: str, capacity: int) -> tuple[int, int]:
        named = self._named(model)
        rest: list[Part] = [ticket, capacity, self.pickup_ms, named.wake_prefix]
        removed, granted = await self._release.call_bound(named.release, rest)
        return int(removed), int(granted)

    def release_nowait(
        self, model: str, ticket: str, capacity: int, timeout_s: float
    ) -> asyncio.Future[Reply] | None:
        """The release sent without waiting: its reply's future, or None (no connection open yet)."""
        named = self._named(model)
        rest: list[Part] = [ticket, capacity, self.pickup_ms, named.wake_prefix]
        return self._release.nowait_bound(named.release, rest, timeout_s)

    async def refund(self, model: str, tenant: str, tokens: int) -> int:
        """Lower ``tenant``'s fair-share finish tag by ``tokens``; returns the tag after."""
        return int(await self._refund.call_bound(self._named(model).refund, [tenant, tokens]))

    async def tick(self, model: str, capacity: int, held: list[str]) -> tuple[int, int, list[str]]:
        """Renew ``held``; returns (queue depth, active leases, the held ids Redis no longer had)."""
        args: list[Arg] = [capacity, self.ttl_ms, self._wake_prefix(model), self.pickup_ms, *held]
        out = await self._tick(self._model_keys(model), args)
        return int(out[0]), int(out[1]), [m.decode() if isinstance(m, bytes) else str(m) for m in out[2:]]

    async def beat(self, model: str, instance: str, capacity: int) -> tuple[int, int, int]:
        """Stamp ``instance`` present for the model; drop absent instances' leases and waiters; grant.
        Returns (queue depth, active leases, leases and waiters dropped)."""
        args: list[Arg] = [instance, self.presence_ms, capacity, self.pickup_ms, self._wake_prefix(model)]
        depth, active, dropped = await self._beat(self._model_keys(model), args)
        return int(depth), int(active), int(dropped)
