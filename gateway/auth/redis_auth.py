"""Step 1 with keys switched on (LLMGW_AUTH=true): a Bearer API key to a tenant, its rights and its limits.

The secret is hashed at once and never logged; log lines name the public key id. A key may raise its
request's priority with ``x-priority`` up to its ``max_priority``, and shorten (never lengthen) its
queue wait with ``x-max-wait-s``. A key is looked up in the key store (one GET) and then served from the
gateway's cache for ``cache_s`` (5 s by default) while the gateway is subscribed to the store's change
channel, which empties the cache on every revoke (gateway/auth/key_cache.py): a revoked key is refused at
once by every gateway that reaches the store. While the store is unreachable, keys verified within
``cache_s`` still pass: a revoked key stops working everywhere within that bound, even on a gateway cut off
from the store; a key not verified lately gets a 503 that says to retry (the key may be valid). Rate limits
live in the ephemeral Redis; while it is unreachable they are not enforced (fail open, logged): serving
beats refusing every caller.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.admission.redis_wire import PipelinedRedis
from gateway.auth.base import Authenticator, OpenAuth
from gateway.auth.key_cache import KeyCache
from gateway.auth.key_changes import KeyChanges
from gateway.auth.keys import ApiKey, KeyStore, hash_secret
from gateway.auth.ratelimit import Decision, RateLimiter, Verdict, limit_headers
from gateway.errors import InvalidRequest, KeyStoreUnavailable, RateLimited, Unauthorized
from gateway.metrics import GatewayMetrics
from gateway.redis_clients import REDIS_DOWN, RedisClients
from gateway.settings import GatewaySettings
from gateway.values import Caller, Charge, TokenCost
from llmgw_contract.redis_keys import RedisKeys

log = logging.getLogger("llmgw.auth")


@dataclass(frozen=True, slots=True)
class KeyCaller(Caller):
    """A caller behind an API key, with the limits that charge() enforces."""

    rpm: int = 0
    tpm: int = 0


def bearer(headers: Mapping[str, str]) -> str:
    """The key from ``Authorization: Bearer <key>``, or from Anthropic's ``x-api-key: <key>``."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else ""
    token = token or headers.get("x-api-key", "").strip()
    if not token:
        raise Unauthorized("no API key given: send the header 'Authorization: Bearer <key>' (or 'x-api-key')")
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


class KeyRateLimited(RateLimited):
    """A key's own limit reached: the 429 carries the key's ``x-ratelimit-*`` headers too."""

    def __init__(self, message: str, *, retry_after: float, limits: list[tuple[str, str]]) -> None:
        super().__init__(message, retry_after=retry_after)
        self.limits = limits

    def headers(self) -> dict[str, str]:
        return {**super().headers(), **dict(self.limits)}


def refusal(decision: Decision, caller: KeyCaller, tokens: int) -> RateLimited | InvalidRequest:
    wait = f"retry in {max(1, math.ceil(decision.retry_after_s))} s"
    limits = limit_headers(caller.rpm, caller.tpm, decision)
    if decision.verdict is Verdict.RPM:
        return KeyRateLimited(
            f"rate limit reached: this API key allows {caller.rpm} requests per minute; {wait}",
            retry_after=decision.retry_after_s,
            limits=limits,
        )
    if decision.verdict is Verdict.TPM:
        return KeyRateLimited(
            f"rate limit reached: this API key allows {caller.tpm} tokens per minute; {wait}",
            retry_after=decision.retry_after_s,
            limits=limits,
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
        cache_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.limiter, self.metrics = store, limiter, metrics
        self.clock = clock
        self.cache = KeyCache(cache_s)
        self._reads: dict[tuple[str, int], asyncio.Future[ApiKey | None]] = {}
        self.changes = KeyChanges(store.redis, store.keys, self.cache)

    async def aclose(self) -> None:
        """Leave the change channel and close the rate limiter's Redis client (the key store's client
        belongs to the gateway's lifespan)."""
        await self.changes.close()
        await self.limiter.aclose()

    async def authenticate(self, headers: Mapping[str, str]) -> Caller:
        key = await self._lookup(bearer(headers))
        return caller_for(key, headers)

    def keys_changed(self) -> None:
        self.cache.changed()

    async def _lookup(self, secret: str) -> ApiKey:
        digest = hash_secret(secret)
        cached = self.cache.fresh(digest, self.clock())
        if cached is not None:
            return cached
        epoch = self.cache.epoch
        try:
            key = await self._read_once(digest, epoch)
        except REDIS_DOWN as exc:
            return self._fallback(digest, exc)
        if key is None:
            self.cache.forget(digest)
            log.info("api key refused: unknown or revoked")
            raise Unauthorized("invalid API key: unknown or revoked")
        self.cache.put(digest, key, self.clock(), epoch)
        return key

    async def _read_once(self, digest: str, epoch: int) -> ApiKey | None:
        """The store's answer for a key, one read shared by every lookup of it that began in the same
        epoch: the requests in flight when a key's entry expires make one round trip, not one each (and
        do not exhaust the client's connection pool). A waiter that is cancelled leaves the read to the
        others."""
        read = self._reads.get((digest, epoch))
        if read is None:
            read = asyncio.ensure_future(self.store.lookup_digest(digest))
            self._reads[(digest, epoch)] = read
            read.add_done_callback(lambda _: self._reads.pop((digest, epoch), None))
        return await asyncio.shield(read)

    def _fallback(self, digest: str, exc: Exception) -> ApiKey:
        key = self.cache.fallback(digest, self.clock())
        if key is not None:
            log.warning("key store unreachable (%s): key_id=%s accepted from cache", exc, key.key_id)
            return key
        log.warning("key store unreachable (%s): an API key could not be verified", exc)
        raise KeyStoreUnavailable(
            "the API key could not be verified right now (key store unreachable); retry later",
            retry_after=2.0,
        )

    async def charge(self, caller: Caller, model: str, cost: TokenCost) -> Charge | None:
        if not isinstance(caller, KeyCaller):
            return None
        tokens = charged_tokens(cost, caller.tpm)
        try:
            decision = await self.limiter.charge(caller.key_id, caller.rpm, caller.tpm, tokens)
        except REDIS_DOWN as exc:
            log.warning(
                "rate limits not enforced for key_id=%s: key store unreachable (%s)", caller.key_id, exc
            )
            return None
        if decision.allowed:
            limits = tuple(limit_headers(caller.rpm, caller.tpm, decision))
            return Charge(decision.window, tokens if caller.tpm > 0 else 0, limits)
        self.metrics.rate_limited.labels(model, decision.verdict.name.lower()).inc()
        log.debug("key_id=%s model=%s refused by its %s limit", caller.key_id, model, decision.verdict.name)
        raise refusal(decision, caller, tokens)

    async def refund(self, caller: Caller, charge: Charge, tokens: int) -> None:
        """Sent without waiting for Redis (gateway/auth/ratelimit.py ``refund_nowait``: a failure is
        logged there): the request's settle makes no round trip for it."""
        if isinstance(caller, KeyCaller) and tokens > 0:
            self.limiter.refund_nowait(caller.key_id, charge.window, tokens)


def charged_tokens(cost: TokenCost, tpm: int) -> int:
    """The reservation, except that a request without an explicit limit is never refused outright for
    its context-length reservation alone: it reserves at most the key's whole minute (refunded after)."""
    if cost.explicit or tpm <= 0:
        return cost.reserved
    return min(cost.reserved, max(cost.prompt, tpm))


def build_auth(
    settings: GatewaySettings,
    keys: RedisKeys,
    metrics: GatewayMetrics,
    store: KeyStore,
    clients: RedisClients,
    lean: PipelinedRedis | None = None,
) -> Authenticator:
    """Keys checked against ``store`` with per-key limits on the ``limits`` Redis client, or nobody
    checked (``LLMGW_AUTH=false``). ``lean``: the admission queue's pipelined connection to the same
    server, which the limits' scripts share (gateway/admission ``lean_of``)."""
    limits = clients.limits
    if not settings.auth or limits is None:
        return OpenAuth()
    return RedisAuth(store, RateLimiter(limits, keys, lean=lean), metrics, settings.auth_cache_s)
