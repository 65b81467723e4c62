"""Step 1 with keys switched on (LLMGW_AUTH=true): a Bearer API key to a tenant, its rights and its limits.

The secret is hashed at once and never logged; log lines name the public key id. A key may raise its
request's priority with ``x-priority`` up to its ``max_priority``, and shorten (never lengthen) its
queue wait with ``x-max-wait-s``. While Redis is unreachable, keys seen valid within ``cache_s`` still
pass, and rate limits are not enforced (fail open, logged): serving beats refusing every caller.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from contract.redis_keys import RedisKeys
from gateway.admission.redis_queue import fast_client
from gateway.auth.base import Authenticator, OpenAuth
from gateway.auth.keys import ApiKey, KeyStore, hash_secret
from gateway.auth.ratelimit import Decision, RateLimiter, Verdict
from gateway.context import Caller
from gateway.errors import InvalidRequest, RateLimited, Unauthorized
from gateway.metrics import GatewayMetrics
from gateway.settings import GatewaySettings
from gateway.steps.tokens import Charge, TokenCost

log = logging.getLogger("llmgw.auth")
MAX_CACHED_KEYS = 100_000


@dataclass(frozen=True, slots=True)
class KeyCaller(Caller):
    """A caller behind an API key, with the limits that charge() enforces."""

    rpm: int = 0
    tpm: int = 0


def bearer(headers: Mapping[str, str]) -> str:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("no API key given: send the header 'Authorization: Bearer <key>'")
    return token


def requested_priority(headers: Mapping[str, str], key: ApiKey) -> int:
    raw = headers.get("x-priority")
    if raw is None:
        return key.priority
    try:
        asked = int(raw)
    except ValueError:
        raise InvalidRequest("the header x-priority must be an integer", param="x-priority") from None
    return max(0, min(asked, key.max_priority))


def requested_wait(headers: Mapping[str, str], key: ApiKey) -> float | None:
    raw = headers.get("x-max-wait-s")
    if raw is None:
        return key.max_wait_s
    try:
        asked = float(raw)
    except ValueError:
        asked = math.nan
    if not (math.isfinite(asked) and asked > 0):
        raise InvalidRequest(
            "the header x-max-wait-s must be a positive number of seconds", param="x-max-wait-s"
        )
    return asked if key.max_wait_s is None else min(asked, key.max_wait_s)


def caller_for(key: ApiKey, headers: Mapping[str, str]) -> KeyCaller:
    return KeyCaller(
        tenant=key.tenant,
        key_id=key.key_id,
        priority=requested_priority(headers, key),
        allowed_models=frozenset(key.models) if key.models is not None else None,
        max_wait_s=requested_wait(headers, key),
        rpm=key.rpm,
        tpm=key.tpm,
    )


def refusal(decision: Decision, caller: KeyCaller, tokens: int) -> RateLimited | InvalidRequest:
    wait = f"retry in {max(1, math.ceil(decision.retry_after_s))} s"
    if decision.verdict is Verdict.RPM:
        return RateLimited(
            f"rate limit reached: this API key allows {caller.rpm} requests per minute; {wait}",
            retry_after=decision.retry_after_s,
        )
    if decision.verdict is Verdict.TPM:
        return RateLimited(
            f"rate limit reached: this API key allows {caller.tpm} tokens per minute; {wait}",
            retry_after=decision.retry_after_s,
        )
    return InvalidRequest(
        f"this request may use {tokens} tokens, more than the {caller.tpm} tokens per minute this API key"
        " allows; lower max_tokens or shorten the prompt",
        param="max_tokens",
    )


class RedisAuth:
    def __init__(
        self,
        store: KeyStore,
        limiter: RateLimiter,
        metrics: GatewayMetrics,
        cache_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.limiter, self.metrics = store, limiter, metrics
        self.cache_s, self.clock = cache_s, clock
        self._seen: dict[str, tuple[ApiKey, float]] = {}

    async def aclose(self) -> None:
        """Close the key store's Redis client (the lifespan's shutdown)."""
        await self.store.redis.aclose()

    async def authenticate(self, headers: Mapping[str, str]) -> Caller:
        key = await self._lookup(bearer(headers))
        return caller_for(key, headers)

    async def _lookup(self, secret: str) -> ApiKey:
        digest = hash_secret(secret)
        try:
            key = await self.store.lookup(secret)
        except (RedisError, OSError) as exc:
            return self._cached(digest, exc)
        if key is None:
            self._seen.pop(digest, None)
            log.info("api key refused: unknown or revoked")
            raise Unauthorized("invalid API key: unknown or revoked")
        if len(self._seen) >= MAX_CACHED_KEYS:
            self._seen.clear()
        self._seen[digest] = (key, self.clock())
        return key

    def _cached(self, digest: str, exc: Exception) -> ApiKey:
        seen = self._seen.get(digest)
        if seen is not None and self.clock() - seen[1] <= self.cache_s:
            log.warning("key store unreachable (%s): key_id=%s accepted from cache", exc, seen[0].key_id)
            return seen[0]
        log.warning("key store unreachable (%s): an API key could not be verified", exc)
        raise Unauthorized(
            "the API key could not be verified right now (key store unreachable); retry later",
            retry_after=2.0,
        )

    async def charge(self, caller: Caller, model: str, cost: TokenCost) -> Charge | None:
        if not isinstance(caller, KeyCaller):
            return None
        tokens = charged_tokens(cost, caller.tpm)
        try:
            decision = await self.limiter.charge(caller.key_id, caller.rpm, caller.tpm, tokens)
        except (RedisError, OSError) as exc:
            log.warning(
                "rate limits not enforced for key_id=%s: key store unreachable (%s)", caller.key_id, exc
            )
            return None
        if decision.allowed:
            return Charge(decision.window, tokens) if caller.tpm > 0 else None
        self.metrics.rate_limited.labels(model, decision.verdict.name.lower()).inc()
        log.debug("key_id=%s model=%s refused by its %s limit", caller.key_id, model, decision.verdict.name)
        raise refusal(decision, caller, tokens)

    async def refund(self, caller: Caller, charge: Charge, tokens: int) -> None:
        if not isinstance(caller, KeyCaller) or tokens <= 0:
            return
        try:
            await self.limiter.refund(caller.key_id, charge.window, tokens)
        except (RedisError, OSError) as exc:
            log.warning("key_id=%s: %d unused tokens not refunded (%s)", caller.key_id, tokens, exc)


def charged_tokens(cost: TokenCost, tpm: int) -> int:
    """The reservation, except that a request without an explicit limit is never refused outright for
    its context-length reservation alone: it reserves at most the key's whole minute (refunded after)."""
    if cost.explicit or tpm <= 0:
        return cost.reserved
    return min(cost.reserved, max(cost.prompt, tpm))


def auth_client(settings: GatewaySettings) -> aioredis.Redis:
    return fast_client(settings.redis_url, settings.admission_redis_timeout_s)


def build_auth(settings: GatewaySettings, keys: RedisKeys, metrics: GatewayMetrics) -> Authenticator:
    if not settings.auth:
        return OpenAuth()
    redis = auth_client(settings)
    return RedisAuth(KeyStore(redis, keys), RateLimiter(redis, keys), metrics, settings.auth_cache_s)
