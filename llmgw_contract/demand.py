"""One model's demand, summed over every gateway, read from what the admission queue already keeps.

:func:`read_demand` runs one script (``lua/demand.lua``) on the model's keys, all under its hash tag: the
queue's waiters (:meth:`RedisKeys.queue`), the live leases (:meth:`RedisKeys.leases`), the gateways'
shared in-flight counts (:meth:`RedisKeys.inflight`, what runs with admission off) and the moment a
request was first seen waiting while nothing ran (:meth:`RedisKeys.waiting_since`, which the script
stamps). O(waiters' count + gateways), never a keyspace scan. The scaler (:mod:`workers.scale`) serves it
to KEDA; the supervisor can read the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from llmgw_contract.inflight_share import MAX_AGE_MS
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.stamps import run


@dataclass(frozen=True, slots=True)
class Demand:
    """What one model is asked for now, on Redis' clock."""

    queued: int
    """Requests waiting in the shared queue (every gateway's)."""
    running: int
    """Live leases: requests admitted and not yet released."""
    shared_inflight: int
    """Requests in flight on the model's replicas by the gateways' fresh in-flight shares."""
    waiting_since_ms: int
    """When a request was first seen waiting while nothing ran (0: none waits so)."""
    now_ms: int

    @property
    def in_flight(self) -> int:
        """Requests running: the leases, or the shares where admission is off (the two count the same
        requests, so the larger is taken, never the sum)."""
        return max(self.running, self.shared_inflight)

    @property
    def total(self) -> int:
        """In flight + queued: the metric each replica carries ``target_per_replica`` of."""
        return self.in_flight + self.queued

    @property
    def waiting_at_zero(self) -> bool:
        """A request waits and nothing runs: the model needs its first replica."""
        return self.waiting_since_ms > 0


async def read_demand(
    redis: aioredis.Redis, keys: RedisKeys, model: str, max_age_ms: int = MAX_AGE_MS
) -> Demand:
    """The model's demand in one script call; raises RedisError/OSError when Redis is unreachable."""
    names = [keys.queue(model), keys.leases(model), keys.inflight(model), keys.waiting_since(model)]
    queued, running, shared, since, now = await run(redis, "demand", names, [max_age_ms])
    return Demand(int(queued), int(running), int(shared), int(since), int(now))
