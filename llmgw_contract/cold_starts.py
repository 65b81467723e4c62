"""A model's measured cold starts, per device kind, kept in Redis: the ETA of a request held at zero.

:func:`record_cold_start` is called where a replica of the model becomes ready after a start from
nothing (on one host, the supervisor's scale from zero); it keeps an exponentially weighted moving
average of the seconds per device kind in :meth:`RedisKeys.cold_starts`, and which kind was measured
last.

A start the supervisor had not prepared (``prepared=False``: the page-cache warm-up of
:mod:`workers.autoscale.warmup` had not read the model's start ahead, so its files came from disk, as
on the first start after a boot) is slower than the starts that follow, for a cause they will not have.
It is the estimate only while nothing else is known (marked so in the field ``<kind>:unprepared``),
replaced, not averaged, by the first prepared start, and it never moves an estimate of prepared starts
(:func:`folded`). :func:`read_cold_start` gives the gateway that estimate for the kind measured last (the
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
UNPREPARED = ":unprepared"
"""Suffix of the field that marks a kind's estimate as made of unprepared starts only."""


def averaged(previous: float | None, seconds: float) -> float:
    """The new average: the measurement itself first, then ``WEIGHT`` of it and the rest of the old."""
    return seconds if previous is None else WEIGHT * seconds + (1 - WEIGHT) * previous


def folded(previous: float | None, unprepared: bool, seconds: float, prepared: bool) -> tuple[float, bool]:
    """(the new estimate, whether it is made of unprepared starts only) after a start of ``seconds``;
    ``unprepared``: whether ``previous`` is. See the module doc."""
    if previous is None:
        return seconds, not prepared
    if prepared:
        return (seconds if unprepared else averaged(previous, seconds)), False
    return (averaged(previous, seconds), True) if unprepared else (previous, False)


async def record_cold_start(
    redis: aioredis.Redis,
    keys: RedisKeys,
    model: str,
    device_kind: str,
    seconds: float,
    prepared: bool = True,
) -> float | None:
    """Fold one measured start from nothing into the model's estimate for ``device_kind`` (:func:`folded`)
    and return the new estimate (None when Redis is unreachable: the measurement is lost, logged). Two
    hosts recording at once may each fold into the same old value (one measurement then counts less)."""
    key, mark = keys.cold_starts(model), device_kind + UNPREPARED
    try:
        raw, marked = await redis.hmget(key, [device_kind, mark])
        old = float(raw) if raw is not None else None
        value, unprepared = folded(old, marked is not None, seconds, prepared)
        pipe = redis.pipeline(transaction=True)
        pipe.hset(key, mapping={device_kind: f"{value:.3f}", LAST: device_kind})
        if unprepared:
            pipe.hset(key, mark, "1")
        else:
            pipe.hdel(key, mark)
        await pipe.execute()
    except REDIS_DOWN as exc:
        log.warning("model=%s cold start of %.1f s not recorded: %s", model, seconds, exc)
        return None
    log.info("model=%s cold start on %s took %.1f s%s (estimate %.1f s)", model, device_kind, seconds,
             "" if prepared else ", unprepared", value)  # fmt: skip
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
