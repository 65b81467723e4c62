"""A model's measured cold starts, per device kind, kept in Redis: the ETA of a request held at zero.

:func:`record_cold_start` is called where a replica of the model becomes ready after a start from
nothing (on one host, the supervisor's wake of an on-demand model); it keeps an exponentially weighted
moving average of the seconds per device kind in :meth:`RedisKeys.cold_starts`, and which kind was
measured last. :func:`read_cold_start` gives the gateway that estimate for the kind measured last (the
kind the model was last started on), or None while nothing was measured. Both tolerate an unreachable
Redis (a measurement is lost, an estimate is unknown), so neither path fails for it.
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis

from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import REDIS_DOWN

log = logging.getLogger("llmgw.cold_starts")
WEIGHT = 0.5
"""The weight of a new measurement in the average (the last few starts count; one outlier is halved)."""
LAST = "last"


def averaged(previous: float | None, seconds: float) -> float:
    """The new average: the measurement itself first, then ``WEIGHT`` of it and the rest of the old."""
    return seconds if previous is None else WEIGHT * seconds + (1 - WEIGHT) * previous


async def record_cold_start(
    redis: aioredis.Redis, keys: RedisKeys, model: str, device_kind: str, seconds: float
) -> float | None:
    """Fold one measured start from nothing into the model's average for ``device_kind`` and return the
    new average (None when Redis is unreachable: the measurement is lost, logged). Two hosts recording
    at once may each average from the same old value (one measurement then counts less)."""
    key = keys.cold_starts(model)
    try:
        raw = await redis.hget(key, device_kind)
        value = averaged(float(raw) if raw is not None else None, seconds)
        await redis.hset(key, mapping={device_kind: f"{value:.3f}", LAST: device_kind})
    except REDIS_DOWN as exc:
        log.warning("model=%s cold start of %.1f s not recorded: %s", model, seconds, exc)
        return None
    log.info("model=%s cold start on %s took %.1f s (average %.1f s)", model, device_kind, seconds, value)
    return value


async def read_cold_start(
    redis: aioredis.Redis, keys: RedisKeys, model: str, device_kind: str | None = None
) -> float | None:
    """The average cold start (seconds) on ``device_kind``, or on the kind the model was measured on
    last when none is named; None when none was measured or Redis is unreachable."""
    try:
        found = await redis.hgetall(keys.cold_starts(model))
    except REDIS_DOWN:
        return None
    fields = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in found.items()}
    last = fields.get(LAST)
    kind = device_kind or (last.decode() if isinstance(last, bytes) else last)
    raw = fields.get(kind) if kind is not None else None
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None
