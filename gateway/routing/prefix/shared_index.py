"""The prefix index in Redis, shared by every gateway: one Lua script per pick reads, decides, records.

The script (``lua/pick.lua``, over the admission's pipelined connection
:class:`gateway.admission.redis_wire.PipelinedRedis`: redis-py cost more CPU per call than the rest of
the pick) does what :meth:`gateway.routing.prefix.index.PrefixIndex.pick` does, in one
atomic step and one round trip, so every gateway that picks for the same state picks the same replica.
Every key carries the model as a hash tag (:class:`llmgw_contract.redis_keys.RedisKeys`), so one model's index
lives in one Redis Cluster slot.

Degraded mode. When Redis fails (error or ``timeout_s``), :meth:`SharedIndex.pick` returns None, and for
``retry_s`` after that it returns None without trying, so that a lost Redis costs at most one timeout
per ``retry_s``, never a failed request; the caller routes by the rendezvous ranking meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from hashlib import blake2b
from importlib import resources

import redis.asyncio as aioredis

from gateway.admission.redis_cluster_wire import lean_client, socket_timeout
from gateway.admission.redis_wire import LeanScript
from gateway.metrics import GatewayMetrics
from gateway.redis_clients import REDIS_DOWN
from gateway.routing.prefix.index import Decision, PickInput
from llmgw_contract.redis_keys import RedisKeys

log = logging.getLogger("llmgw.prefix_index")

SHARED, DEGRADED = "shared", "degraded"
"""The key modes, per replica (``kv_index`` in its :class:`llmgw_contract.registry.ReplicaRecord`):
``approximate``, the index's keys for a replica are the gateways' placements, aged by an LRU sized from an
estimate of bytes per token; ``exact``, its managing agent also writes what its engine holds, from vLLM's
KV events (:mod:`llmgw_contract.kv_feed`), and the placements only bridge the time until the engine stores
them."""


def script(name: str) -> str:
    common = resources.files("llmgw_contract") / "lua" / "prefix_common.lua"
    own = resources.files("gateway.routing") / "lua" / f"{name}.lua"
    return common.read_text() + "\n" + own.read_text()


def session_digest(session: str) -> str:
    """A fixed-size name for a session key of any length or content."""
    return blake2b(session.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def pick_call(
    keys: RedisKeys, model: str, inp: PickInput, session_ttl_ms: int
) -> tuple[list[str], list[str]]:
    """The script's KEYS and ARGV for one pick."""
    session_key = keys.prefix_session(model, session_digest(inp.session or ""))
    names = [keys.prefix_holders(model), keys.prefix_instances(model), keys.prefix_clock(model), session_key]
    names += [keys.prefix_recent(model), *(keys.prefix_lru(model, r.id) for r in inp.replicas)]
    names += [keys.prefix_kv(model, r.id) for r in inp.replicas]
    (p, q), (sp, sq) = inp.ratio, inp.share_ratio
    args = [str(len(inp.replicas)), str(p), str(q), "1" if inp.session else "0", str(session_ttl_ms)]
    args += [str(sp), str(sq), str(inp.window), "1" if inp.detour else "0"]
    for r in inp.replicas:
        args += [r.id, r.instance, str(r.load), str(r.capacity), "1" if r.exact else "0"]
    return names, [*args, *inp.chain]


def text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class SharedIndex:
    """The gateway's handle on every model's shared index, and its mode (shared or degraded)."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: RedisKeys,
        session_ttl_s: float = 3600.0,
        retry_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.redis, self.keys, self.clock, self.metrics = redis, keys, clock, metrics
        self.session_ttl_ms = max(1, int(session_ttl_s * 1000))
        self.retry_s = retry_s
        timeout_s = socket_timeout(redis, 0.5)
        self.lean = lean_client(redis, timeout_s)  # the pick is on the request path: the lean client
        self._pick = LeanScript(self.lean, script("pick"))
        self._forget = redis.register_script(script("forget"))
        self.retry_at = 0.0
        self.mode = SHARED
        if metrics is not None:
            metrics.prefix_index_shared.set(1)

    def count(self, model: str, outcome: str) -> None:
        """One pick of ``model`` with that outcome (``degraded`` for a pick without the index)."""
        if self.metrics is not None:
            self.metrics.prefix_picks.labels(model, outcome).inc()

    async def pick(self, model: str, inp: PickInput) -> Decision | None:
        """The decision, recorded in Redis; None in degraded mode (the caller routes without the index)."""
        if self.mode == DEGRADED and self.clock() < self.retry_at:
            return None
        names, args = pick_call(self.keys, model, inp, self.session_ttl_ms)
        try:
            replica, outcome, depth = await self._pick(names, list(args))
        except REDIS_DOWN as exc:
            self.lost(exc)
            return None
        self.back()
        return Decision(text(replica), text(outcome), int(depth))

    async def forget_absent(self, model: str, present: Sequence[str]) -> list[str]:
        """Drop the entries of the model's replicas that left the registry; [] when Redis fails."""
        names = [self.keys.prefix_holders(model), self.keys.prefix_instances(model)]
        try:
            prefixes = [self.keys.prefix_lru(model, ""), self.keys.prefix_kv(model, "")]
            gone = await self._forget(keys=names, args=[*prefixes, *present])
        except REDIS_DOWN as exc:
            self.lost(exc)
            return []
        return [text(g) for g in gone]

    def lost(self, exc: BaseException) -> None:
        if self.mode == SHARED:
            log.warning("prefix index unreachable (%s): degraded to the rendezvous ranking", exc)
        self.mode, self.retry_at = DEGRADED, self.clock() + self.retry_s
        if self.metrics is not None:
            self.metrics.prefix_index_shared.set(0)

    def back(self) -> None:
        if self.mode == DEGRADED:
            log.info("prefix index reachable again: shared mode")
            if self.metrics is not None:
                self.metrics.prefix_index_shared.set(1)
        self.mode = SHARED

    async def aclose(self) -> None:
        self.lean.close()
        await self.redis.aclose()
