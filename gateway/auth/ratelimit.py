"""Requests and tokens per minute per API key, exact across every gateway replica.

Fixed windows aligned to Redis' own clock (``floor(unix seconds / 60)``): one counter per kind and window,
in one hash per key (its one Redis Cluster slot, named in the script's KEYS), checked and incremented by
one Lua script, so concurrent gateways can never together
let more than the limit through in a window (no clock skew between gateways either: only Redis' clock
counts). A request is charged 1 against RPM and its token reservation (gateway/pipeline/tokens.py)
against TPM, both or neither; what it did not use is refunded into the same window when it ends. The
price of a fixed window is a burst of up to twice the limit across a window boundary; the gain is
exactness and one small counter instead of a log of timestamps.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import redis.asyncio as aioredis

from gateway.admission.redis_cluster_wire import lean_client, socket_timeout
from gateway.admission.redis_wire import LeanScript, PipelinedRedis, Reply
from gateway.admission.resp import Head, Part, awaited_call_needed
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import REDIS_DOWN
from llmgw_contract.supervision import guarded

log = logging.getLogger("llmgw.auth")

WINDOW_S = 60
DEFAULT_TIMEOUT_S = 1.0
MAX_HEADS = 10_000

CHARGE_LUA = """
-- KEYS: the key's counters hash (fields 'rpm:<window>', 'tpm:<window>'; one Redis Cluster slot per key)
-- ARGV: window seconds, rpm limit, tpm limit, tokens (0 limit = unlimited)
-- Returns {verdict, ms until the window ends, window, requests counted, tokens counted}: 0 ok, 1 rpm over,
-- 2 tpm over, 3 tokens exceed tpm; the counts are the window's after this charge (before, when refused)
local counters, window_s = KEYS[1], tonumber(ARGV[1])
local rpm, tpm, tokens = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = math.floor(now_ms / (window_s * 1000))
local left_ms = (window + 1) * window_s * 1000 - now_ms
local rfield, tfield = 'rpm:' .. window, 'tpm:' .. window
local used = redis.call('HMGET', counters, rfield, tfield)
local requests, counted = tonumber(used[1] or '0'), tonumber(used[2] or '0')
if tpm > 0 and tokens > tpm then
  return {3, left_ms, window, requests, counted}
end
if rpm > 0 and requests + 1 > rpm then
  return {1, left_ms, window, requests, counted}
end
if tpm > 0 and counted + tokens > tpm then
  return {2, left_ms, window, requests, counted}
end
requests = redis.call('HINCRBY', counters, rfield, 1)
if requests == 1 then
  -- a new window: the counters of windows before the previous one go (a refund reaches one back)
  local fields = redis.call('HKEYS', counters)
  for _, f in ipairs(fields) do
    if tonumber(string.match(f, ':(%d+)$')) < window - 1 then
      redis.call('HDEL', counters, f)
    end
  end
end
counted = redis.call('HINCRBY', counters, tfield, tokens)
redis.call('EXPIRE', counters, 2 * window_s)
return {0, left_ms, window, requests, counted}
"""

REFUND_LUA = """
-- KEYS: the key's counters hash. ARGV: window, tokens. Gives back up to `tokens` of that window's token
-- count (never below zero; nothing once the window's counter is gone). Returns the tokens given back.
local field = 'tpm:' .. ARGV[1]
local count = tonumber(redis.call('HGET', KEYS[1], field) or '0')
local back = math.min(count, tonumber(ARGV[2]))
if back > 0 then
  redis.call('HINCRBY', KEYS[1], field, -back)
end
return back
"""


class Verdict(IntEnum):
    OK = 0
    RPM = 1
    TPM = 2
    TOO_LARGE = 3


@dataclass(frozen=True, slots=True)
class Decision:
    """The charge's verdict, the seconds until its window ends, the window, and the window's counts of
    requests and tokens (after the charge; before it when refused)."""

    verdict: Verdict
    retry_after_s: float
    window: int = 0
    requests_used: int = 0
    tokens_used: int = 0

    @property
    def allowed(self) -> bool:
        return self.verdict is Verdict.OK


def reset_text(seconds: float) -> str:
    """A reset time as OpenAI writes it in ``x-ratelimit-reset-*``: ``59.5s``, ``1s``, ``250ms``."""
    if seconds >= 1:
        return f"{round(seconds, 3):g}s"
    return f"{max(0, round(seconds * 1000))}ms"


def limit_headers(rpm: int, tpm: int, decision: Decision) -> list[tuple[str, str]]:
    """OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` for a key's limits (a limit
    of 0, none, has no headers), from the decision's counts: no Redis call of its own."""
    reset = reset_text(decision.retry_after_s)
    out: list[tuple[str, str]] = []
    for kind, limit, used in (
        ("requests", rpm, decision.requests_used),
        ("tokens", tpm, decision.tokens_used),
    ):
        if limit > 0:
            out.append((f"x-ratelimit-limit-{kind}", str(limit)))
            out.append((f"x-ratelimit-remaining-{kind}", str(max(0, limit - used))))
            out.append((f"x-ratelimit-reset-{kind}", reset))
    return out


def window_of(now_s: float, window_s: int = WINDOW_S) -> int:
    return math.floor(now_s / window_s)


def seconds_left(now_s: float, window_s: int = WINDOW_S) -> float:
    return (window_of(now_s, window_s) + 1) * window_s - now_s


class RateLimiter:
    """The scripts, called over the lean pipelined client (gateway/admission/redis_wire.py) to wherever
    ``redis`` points (one server, Sentinel's master, a cluster), with its socket timeout: a charge is on
    every limited request's path, where redis-py's per-call cost showed."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: RedisKeys,
        window_s: int = WINDOW_S,
        lean: PipelinedRedis | None = None,
    ) -> None:
        """``lean``: a pipelined connection to the same server that another part owns and closes (the
        admission queue's: a request's release and refund then leave in one write); else its own."""
        self.redis, self.keys, self.window_s = redis, keys, window_s
        self.owns_lean = lean is None
        self.lean = lean or lean_client(redis, socket_timeout(redis, DEFAULT_TIMEOUT_S))
        self._charge = LeanScript(self.lean, CHARGE_LUA)
        self._refund = LeanScript(self.lean, REFUND_LUA)
        self._heads: dict[str, tuple[Head, Head]] = {}  # a key's charge and refund, its key name encoded once
        self._sent: set[asyncio.Future[Reply]] = set()  # refunds sent without waiting (refund_nowait)
        self._tasks: set[asyncio.Task[bool]] = set()  # and those that needed the awaited call

    async def aclose(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Wait (up to ``timeout_s``) for the refunds still under way, then close the lean connection
        (its own) and the redis-py client it was modelled on."""
        under_way: list[asyncio.Future[Any]] = [*self._sent, *self._tasks]
        if under_way:
            await asyncio.wait(under_way, timeout=timeout_s)
        if self.owns_lean:
            self.lean.close()
        await self.redis.aclose()

    async def charge(self, key_id: str, rpm: int, tpm: int, tokens: int) -> Decision:
        if rpm <= 0 and tpm <= 0:
            return Decision(Verdict.OK, 0.0)
        args: list[Part] = [self.window_s, rpm, tpm, max(0, tokens)]
        verdict, left_ms, window, requests, tokens_used = await self._charge.call_bound(
            self._bound(key_id)[0], args
        )
        return Decision(
            Verdict(int(verdict)), int(left_ms) / 1000, int(window), int(requests), int(tokens_used)
        )

    async def refund(self, key_id: str, window: int, tokens: int) -> int:
        """Give back tokens charged in ``window`` that the request did not use; returns those given back."""
        if tokens <= 0:
            return 0
        return int(await self._refund.call_bound(self._bound(key_id)[1], [window, tokens]))

    def _bound(self, key_id: str) -> tuple[Head, Head]:
        """The key's charge and refund calls with its counters' name, encoded on its first request (at
        most ``MAX_HEADS`` keys are kept; past that the cache starts afresh)."""
        heads = self._heads.get(key_id)
        if heads is None:
            if len(self._heads) >= MAX_HEADS:
                self._heads.clear()
            counters = [self.keys.rate(key_id)]
            heads = self._heads[key_id] = (self._charge.bind(counters), self._refund.bind(counters))
        return heads

    def refund_nowait(self, key_id: str, window: int, tokens: int) -> None:
        """The same, sent at once without waiting for the reply (no task: a request's settle does not
        wait for Redis); a failure is logged. Before the connection is open, or when the reply asks for
        the awaited call (NOSCRIPT, a cluster's MOVED or ASK), it is made by a task. ``aclose`` waits
        for both."""
        if tokens <= 0:
            return
        reply = self._refund.nowait_bound(self._bound(key_id)[1], [window, tokens])
        if reply is None:
            self._in_task(key_id, window, tokens)
            return
        self._sent.add(reply)
        reply.add_done_callback(functools.partial(self._refunded, key_id, window, tokens))

    def _refunded(self, key_id: str, window: int, tokens: int, reply: asyncio.Future[Reply]) -> None:
        self._sent.discard(reply)
        exc = None if reply.cancelled() else reply.exception()
        if awaited_call_needed(exc):
            self._in_task(key_id, window, tokens)
        elif exc is not None:
            not_refunded(key_id, tokens, exc)

    def _in_task(self, key_id: str, window: int, tokens: int) -> None:
        refund = self._refund_quietly(key_id, window, tokens)  # any other failure: logged with its stack
        task = asyncio.ensure_future(guarded("tpm refund", refund, subject=key_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _refund_quietly(self, key_id: str, window: int, tokens: int) -> None:
        try:
            await self.refund(key_id, window, tokens)
        except REDIS_DOWN as exc:
            not_refunded(key_id, tokens, exc)


def not_refunded(key_id: str, tokens: int, exc: BaseException) -> None:
    log.warning("key_id=%s: %d unused tokens not refunded (%s)", key_id, tokens, exc)
