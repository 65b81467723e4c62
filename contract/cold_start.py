"""A model's measured cold starts (from nothing to READY), per device kind, kept in Redis for every gateway.

The supervisor calls :func:`record_cold_start` when a replica it started from zero becomes ready; the
gateways read :func:`read_cold_start` for the ETA of a request held while the model has no replica. The
value is an exponentially weighted mean (weight :data:`ALPHA` for the newest start; the first start is
taken as it is), in the hash :meth:`contract.redis_keys.RedisKeys.cold_start`: field ``<device_kind>``
= seconds, ``<device_kind>:count`` = starts measured. One supervisor writes a model's value (one host),
so the read-then-write is not made atomic.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from contract.redis_keys import RedisKeys

ALPHA = 0.3
"""The newest start's weight in the mean."""


def ewma(previous: float | None, seconds: float, alpha: float = ALPHA) -> float:
    """The mean after one more start of ``seconds`` (``previous`` None: the first start)."""
    return seconds if previous is None else alpha * seconds + (1 - alpha) * previous


async def read_cold_start(
    redis: aioredis.Redis, keys: RedisKeys, model: str, device_kind: str
) -> float | None:
    """The model's mean cold start on ``device_kind`` in seconds; None when none was measured."""
    value = await redis.hget(keys.cold_start(model), device_kind)
    return None if value is None else float(value)


async def record_cold_start(
    redis: aioredis.Redis, keys: RedisKeys, model: str, device_kind: str, seconds: float
) -> float:
    """Fold one cold start of ``seconds`` into the model's mean on ``device_kind``; returns the new mean."""
    mean = ewma(await read_cold_start(redis, keys, model, device_kind), seconds)
    pipe = redis.pipeline(transaction=False)
    pipe.hset(keys.cold_start(model), device_kind, repr(mean))
    pipe.hincrby(keys.cold_start(model), f"{device_kind}:count", 1)
    await pipe.execute()
    return mean
