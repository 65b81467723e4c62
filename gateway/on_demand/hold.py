"""Requests held through a scale from zero: which model is at zero, its ETA, and who cannot wait for it.

A model whose scaling rule allows zero replicas (``scaling.min_replicas: 0``, an on-demand model) and of
which the registry lists nothing is *at zero*, not lost: in Kubernetes a model scaled to zero has no pod
and so no record, and the scaler starts one when a request waits. Its requests are held in the shared
queue (the on-demand wait, :func:`gateway.pipeline.admit.admit_waking`) instead of the 503 that a model
with no record at all gets otherwise (``wake_unregistered_s``: the supervisor is down).

The ETA is the model's measured cold start (:mod:`llmgw_contract.cold_starts`) less the time since a request
was first seen waiting for it at zero (:meth:`RedisKeys.waiting_since`, stamped by the demand read), or
the whole estimate when nothing stamped it. A request whose deadline is shorter is refused at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from gateway.errors import ColdStartTooLong
from gateway.redis_clients import REDIS_DOWN
from gateway.values import Caller
from llmgw_contract.cold_starts import read_cold_start
from llmgw_contract.fleet import Model
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.scaling import scaling_rule

MIN_ETA_S = 1.0
"""The least ETA told: a start already past its estimate is expected within about this."""


@dataclass(frozen=True, slots=True)
class Eta:
    """A cold start's estimate and what is left of it now (seconds)."""

    estimate_s: float
    remaining_s: float


def scales_to_zero(model: Model) -> bool:
    """Whether the model may run no replica at all (then no record is no failure)."""
    return model.on_demand and scaling_rule(model).min_replicas == 0


def hold_deadline_s(model: Model, caller: Caller) -> float:
    """How long a request may be held for the model's start: ``wake_timeout_s``, or less when the caller
    asks (``x-max-wait-s``, the key's ``max_wait_s``: what admission takes as the request's wait)."""
    own = caller.max_wait_s
    return model.wake_timeout_s if own is None else min(model.wake_timeout_s, own)


async def read_eta(redis: aioredis.Redis, keys: RedisKeys, model: str) -> Eta | None:
    """The model's ETA; None while no cold start was measured (or Redis cannot say)."""
    estimate = await read_cold_start(redis, keys, model)
    if estimate is None:
        return None
    try:
        async with redis.pipeline(transaction=False) as pipe:
            pipe.get(keys.waiting_since(model))
            pipe.time()
            since, (sec, usec) = await pipe.execute()
    except REDIS_DOWN:
        return Eta(estimate, max(MIN_ETA_S, estimate))
    waited = 0.0 if since is None else max(0.0, sec + usec / 1e6 - int(since) / 1000)
    return Eta(estimate, max(MIN_ETA_S, estimate - waited))


def too_short(model: str, eta: Eta, deadline_s: float) -> ColdStartTooLong:
    """The 503 for a request that cannot wait for the start: Retry-After is the ETA."""
    return ColdStartTooLong(
        f"model '{model}' is starting from zero replicas, ready in about {eta.remaining_s:.0f} s; this "
        f"request may wait {deadline_s:g} s; retry after the ETA",
        retry_after=eta.remaining_s,
    )
