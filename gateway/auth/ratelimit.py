"""Requests and tokens per minute per API key, exact across every gateway replica.

Fixed windows aligned to Redis' own clock (``floor(unix seconds / 60)``): one counter per key, kind and
window in Redis, checked and incremented by one Lua script, so concurrent gateways can never together
let more than the limit through in a window (no clock skew between gateways either: only Redis' clock
counts). A request is charged 1 against RPM and its token reservation (gateway/pipeline/tokens.py)
against TPM, both or neither; what it did not use is refunded into the same window when it ends. The
price of a fixed window is a burst of up to twice the limit across a window boundary; the gain is
exactness and one small counter instead of a log of timestamps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

import redis.asyncio as aioredis

from contract.redis_keys import RedisKeys

WINDOW_S = 60

CHARGE_LUA = """
-- ARGV: counter prefix, window seconds, rpm limit, tpm limit, tokens (0 limit = unlimited)
-- Returns {verdict, ms until the window ends, window}: 0 ok, 1 rpm over, 2 tpm over, 3 tokens exceed tpm
local prefix, window_s = ARGV[1], tonumber(ARGV[2])
local rpm, tpm, tokens = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = math.floor(now_ms / (window_s * 1000))
local left_ms = (window + 1) * window_s * 1000 - now_ms
local rkey = prefix .. ':rpm:' .. window
local tkey = prefix .. ':tpm:' .. window
if tpm > 0 and tokens > tpm then
  return {3, left_ms, window}
end
if rpm > 0 and tonumber(redis.call('GET', rkey) or '0') + 1 > rpm then
  return {1, left_ms, window}
end
if tpm > 0 and tonumber(redis.call('GET', tkey) or '0') + tokens > tpm then
  return {2, left_ms, window}
end
redis.call('INCR', rkey)
redis.call('EXPIRE', rkey, 2 * window_s)
redis.call('INCRBY', tkey, tokens)
redis.call('EXPIRE', tkey, 2 * window_s)
return {0, left_ms, window}
"""

REFUND_LUA = """
-- ARGV: counter prefix, window, tokens. Gives back up to `tokens` of that window's token count (never
-- below zero; nothing once the window's counter expired). Returns the tokens given back.
local key = ARGV[1] .. ':tpm:' .. ARGV[2]
local count = tonumber(redis.call('GET', key) or '0')
local back = math.min(count, tonumber(ARGV[3]))
if back > 0 then
  redis.call('DECRBY', key, back)
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
    verdict: Verdict
    retry_after_s: float
    window: int = 0

    @property
    def allowed(self) -> bool:
        return self.verdict is Verdict.OK


def window_of(now_s: float, window_s: int = WINDOW_S) -> int:
    return math.floor(now_s / window_s)


def seconds_left(now_s: float, window_s: int = WINDOW_S) -> float:
    return (window_of(now_s, window_s) + 1) * window_s - now_s


class RateLimiter:
    def __init__(self, redis: aioredis.Redis, keys: RedisKeys, window_s: int = WINDOW_S) -> None:
        self.redis, self.keys, self.window_s = redis, keys, window_s
        self._charge = redis.register_script(CHARGE_LUA)
        self._refund = redis.register_script(REFUND_LUA)

    async def charge(self, key_id: str, rpm: int, tpm: int, tokens: int) -> Decision:
        if rpm <= 0 and tpm <= 0:
            return Decision(Verdict.OK, 0.0)
        args: list[str | int] = [self.keys.rate_prefix(key_id), self.window_s, rpm, tpm, max(0, tokens)]
        verdict, left_ms, window = await self._charge([], args)
        return Decision(Verdict(int(verdict)), int(left_ms) / 1000, int(window))

    async def refund(self, key_id: str, window: int, tokens: int) -> int:
        """Give back tokens charged in ``window`` that the request did not use; returns those given back."""
        if tokens <= 0:
            return 0
        return int(await self._refund([], [self.keys.rate_prefix(key_id), window, tokens]))
