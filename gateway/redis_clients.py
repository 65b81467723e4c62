"""Every Redis client of one gateway, built here by role and closed once by the lifespan, and the one
name for "Redis is down" (:data:`REDIS_DOWN`, llmgw_contract/redis_url.py's, for every topology).

Roles: ``state`` (the registry, the in-flight share, wakes, stored responses' holders, LoRA records;
2 s timeouts), ``keys`` (the API keys, in their persistent Redis), ``limits`` (the per-key rate limiter),
``admission`` and ``blocking`` (the shared queue's scripts and its BLPOP waits, on a pool of their own),
``presence`` (how to build the synchronous client of the thread that renews the admission presence
stamps, gateway/admission/stamp_renewer.py: built by that thread, since a cluster client connects at
once and Redis may be down at start) and ``index`` (the shared prefix index, with the short timeout of
the request path). A role switched off by its setting has no client.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.settings import GatewaySettings
from llmgw_contract.redis_url import REDIS_DOWN as REDIS_DOWN
from llmgw_contract.redis_url import connect, connect_sync, parse

STATE_TIMEOUT_S = 2.0


def fast_client(url: str, timeout_s: float, max_connections: int | None = None) -> aioredis.Redis:
    """A client that fails fast: short timeouts, one immediate retry (the scripts are idempotent), TCP
    keepalive; for any URL form of llmgw_contract/redis_url.py (one server, Sentinel, Cluster)."""
    return connect(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        socket_keepalive=True,
        retry=Retry(NoBackoff(), 1),
        max_connections=max_connections,
    )


def presence_client(url: str, timeout_s: float) -> redis.Redis:
    """The synchronous client of the presence-renewing thread: short timeouts, one immediate retry (the
    stamp script is idempotent), TCP keepalive; any URL form."""
    return connect_sync(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        socket_keepalive=True,
        retry=redis.retry.Retry(redis.backoff.NoBackoff(), 1),
    )


def blocking_client(url: str, connect_timeout_s: float, max_connections: int) -> aioredis.Redis:
    """Its own pool for BLPOP, so blocked waiters never starve the other calls (bounded by wait_for).
    Sentinel and Cluster: their own pools, of the same size."""
    if parse(url).kind != "single":
        return connect(
            url,
            max_connections=max_connections,
            socket_timeout=None,
            socket_connect_timeout=connect_timeout_s,
            socket_keepalive=True,
        )
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=None,
        socket_timeout=None,
        socket_connect_timeout=connect_timeout_s,
        socket_keepalive=True,
        retry=Retry(NoBackoff(), 0),
    )
    return aioredis.Redis.from_pool(pool)


@dataclass(slots=True)
class RedisClients:
    """One gateway's Redis clients by role (see the module docstring)."""

    state: aioredis.Redis
    keys: aioredis.Redis
    limits: aioredis.Redis | None = None
    admission: aioredis.Redis | None = None
    blocking: aioredis.Redis | None = None
    index: aioredis.Redis | None = None
    presence: Callable[[], redis.Redis] | None = None

    async def aclose(self) -> None:
        """Close every client (once the parts that use them have stopped); errors are not raised."""
        for client in (self.state, self.keys, self.limits, self.admission, self.blocking, self.index):
            if client is not None:
                with contextlib.suppress(*REDIS_DOWN):
                    await client.aclose()


def timed_client(url: str, timeout_s: float) -> aioredis.Redis:
    """A plain client whose every call and connect is bounded by ``timeout_s``."""
    return connect(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)


def build_redis_clients(settings: GatewaySettings) -> RedisClients:
    s, timeout = settings, settings.admission_redis_timeout_s
    admission = s.admission
    return RedisClients(
        state=timed_client(s.redis_url, STATE_TIMEOUT_S),
        keys=fast_client(s.key_store_url, timeout),
        limits=fast_client(s.redis_url, timeout) if s.auth else None,
        admission=fast_client(s.redis_url, timeout) if admission else None,
        blocking=blocking_client(s.redis_url, timeout, s.admission_blocking_connections)
        if admission
        else None,
        index=timed_client(s.redis_url, s.prefix_index_timeout_s) if s.prefix_index else None,
        presence=functools.partial(presence_client, s.redis_url, timeout) if admission else None,
    )
