"""What asks for an on-demand model: the gateways' wake request, and the model's demand in the shared queue
(leases running, tickets waiting); and the one warm-up request a woken replica must answer."""

from __future__ import annotations

import httpx
import redis.asyncio as aioredis

from contract.redis_keys import RedisKeys
from workers.life.process import StartFailed
from workers.life.replica import Replica

AWOKEN = "awoken"
"""The wake request's value for a while after the wake: the model is awake, nobody asks."""
AWOKEN_MS = 3000
"""How long the marker stays: the gateways' ready notice and registry re-read happen well within it."""
WARMUP_PROMPT = "Hello"


def is_wake_request(value: bytes | str | None) -> bool:
    """A gateway's wake request: the key is set and is not the supervisor's just-awoken marker."""
    if isinstance(value, bytes):
        value = value.decode()
    return value is not None and value != AWOKEN


async def requested(redis: aioredis.Redis, keys: RedisKeys, model: str) -> bool:
    """Requests running or waiting for ``model`` in the shared queue, or a wake asked for."""
    pipe = redis.pipeline(transaction=False)
    pipe.zcard(keys.leases(model))
    pipe.zcard(keys.queue(model))
    pipe.get(keys.wake_request(model))
    leases, queued, asked = await pipe.execute()
    return bool(leases or queued or is_wake_request(asked))


async def warm_up(client: httpx.AsyncClient, r: Replica, timeout_s: float) -> None:
    """One token decoded (or one embedding) before the replica takes traffic: /health answering does
    not prove the engine decodes."""
    name = r.spec.model.name
    body: dict[str, str | int] = {"model": name}
    if r.spec.model.kind == "embedding":
        path, body["input"] = "/v1/embeddings", WARMUP_PROMPT
    else:
        path, body["prompt"], body["max_tokens"] = "/v1/completions", WARMUP_PROMPT, 1
    resp = await client.post(r.spec.url + path, json=body, timeout=timeout_s)
    if resp.status_code != 200:
        raise StartFailed(f"warm-up request answered {resp.status_code}: {resp.text[:200]}")
