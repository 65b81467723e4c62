"""What asks for an on-demand model, and what keeps it busy: the gateways' wake request, its leases
(running) and tickets (waiting) in the shared queue, what the gateways have in flight on its replicas
(the shared in-flight hash: counted with admission off too) and what vLLM reports running and waiting;
and the one warm-up request a woken replica must answer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import httpx
import redis.asyncio as aioredis

from llmgw_contract.inflight_share import fresh_counts
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import REDIS_DOWN
from llmgw_contract.stamps import run
from llmgw_contract.vllm_probe import requests_in_engine
from workers.life.process import StartFailed
from workers.life.replica import Replica

log = logging.getLogger("llmgw.ondemand")
AWOKEN = "awoken"
"""The wake request's value for a while after the wake: the model is awake, nobody asks."""
AWOKEN_MS = 3000
"""How long the marker stays: the gateways' ready notice and registry re-read happen well within it."""
WARMUP_PROMPT = "Hello"


async def mark_awoken(redis: aioredis.Redis, keys: RedisKeys, model: str) -> None:
    """The model is awake: a gateway that has not heard yet would ask again, the marker makes its SET NX
    fail (for :data:`AWOKEN_MS`). A Redis failure is logged: a gateway's request expires by itself."""
    try:
        await redis.set(keys.wake_request(model), AWOKEN, px=AWOKEN_MS)
    except REDIS_DOWN as exc:
        log.warning("model=%s wake request not cleared (%s): it expires by itself", model, exc)


async def clear_awoken(redis: aioredis.Redis, keys: RedisKeys, model: str) -> None:
    """The model goes to sleep: its 'awoken' marker is dropped (a gateway's own wake request is kept), so
    the next request's SET NX asks at once even when the sleep came within :data:`AWOKEN_MS` of the wake.
    A Redis failure is logged: the marker expires by itself."""
    try:
        await run(redis, "del_if", [keys.wake_request(model)], [AWOKEN])
    except REDIS_DOWN as exc:
        log.warning("model=%s awoken marker not dropped (%s): it expires by itself", model, exc)


def is_wake_request(value: bytes | str | None) -> bool:
    """A gateway's wake request: the key is set and is not the supervisor's just-awoken marker."""
    if isinstance(value, bytes):
        value = value.decode()
    return value is not None and value != AWOKEN


async def requested(redis: aioredis.Redis, keys: RedisKeys, model: str, replicas: Sequence[str] = ()) -> int:
    """How many requests ask for ``model`` (0: none): running (the shared queue's leases, or the gateways'
    in-flight shares on ``replicas`` where admission is off: the larger, they count the same requests) plus
    waiting in the queue; at least 1 while a wake is asked for. The keys share the model's hash tag (one
    Cluster slot); the shares' age is judged on the clock of the node that holds them, read by a keyed
    script (a Cluster client refuses the keyless TIME in a pipeline)."""
    pipe = redis.pipeline(transaction=False)
    pipe.zcard(keys.leases(model))
    pipe.zcard(keys.queue(model))
    pipe.get(keys.wake_request(model))
    pipe.hvals(keys.inflight(model))
    leases, queued, asked, shares = await pipe.execute()
    now_ms = int(await run(redis, "clock", [keys.inflight(model)], []))
    inflight = fresh_counts(shares, now_ms)
    count = max(int(leases), sum(inflight[r] for r in replicas)) + int(queued)
    return max(count, int(is_wake_request(asked)))


async def in_engine(client: httpx.AsyncClient, urls: Sequence[str]) -> bool:
    """True when vLLM reports a request running or waiting on one of ``urls`` (an unreadable
    ``/metrics`` counts nothing here: a replica that does not answer may be put to sleep)."""
    counts = await asyncio.gather(*(requests_in_engine(client, u) for u in urls))
    return any(counts)


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
