"""RPM/TPM in fixed per-minute windows on Redis' clock: exact under concurrency, both-or-neither."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from gateway.auth.ratelimit import RateLimiter, Verdict, seconds_left, window_of
from llmgw_contract.redis_keys import RedisKeys
from testing.poll import until
from testing.procs import start_redis


async def clear_of_window_edge(redis: aioredis.Redis, window_s: int = 60, margin_s: float = 5.0) -> None:
    """Wait (polling, at most ``margin_s``) until Redis' clock is not about to start a new window."""
    end = time.monotonic() + margin_s + 1
    while time.monotonic() < end:
        secs, micros = await redis.time()
        if seconds_left(secs + micros / 1e6, window_s) > margin_s:
            return
        await asyncio.sleep(0.1)


def test_window_arithmetic() -> None:
    assert window_of(119.9) == 1 and window_of(120.0) == 2
    assert seconds_left(120.0) == 60 and seconds_left(179.5) == pytest.approx(0.5)


async def test_rpm_is_exact_under_concurrency(redis: aioredis.Redis, keys: RedisKeys) -> None:
    limiter = RateLimiter(redis, keys)
    await clear_of_window_edge(redis)
    decisions = await asyncio.gather(*(limiter.charge("k1", 10, 0, 5) for _ in range(40)))
    assert sum(d.allowed for d in decisions) == 10
    refused = [d for d in decisions if not d.allowed]
    assert {d.verdict for d in refused} == {Verdict.RPM}
    assert all(0 < d.retry_after_s <= 60 for d in refused)


async def test_tpm_is_exact_and_charges_both_or_neither(redis: aioredis.Redis, keys: RedisKeys) -> None:
    limiter = RateLimiter(redis, keys)
    await clear_of_window_edge(redis)
    decisions = await asyncio.gather(*(limiter.charge("k2", 100, 250, 60) for _ in range(10)))
    assert sum(d.allowed for d in decisions) == 4  # 4 x 60 = 240 <= 250 < 300
    assert (await limiter.charge("k2", 100, 250, 10)).allowed  # a smaller request still fits
    secs, _ = await redis.time()
    window = window_of(secs)
    assert int(await redis.hget(keys.rate("k2"), f"tpm:{window}") or 0) == 250
    assert int(await redis.hget(keys.rate("k2"), f"rpm:{window}") or 0) == 5  # refused ones not counted


async def test_request_larger_than_the_tpm_limit(redis: aioredis.Redis, keys: RedisKeys) -> None:
    limiter = RateLimiter(redis, keys)
    assert (await limiter.charge("k3", 0, 100, 101)).verdict is Verdict.TOO_LARGE


async def test_unlimited_key_touches_nothing(redis: aioredis.Redis, keys: RedisKeys) -> None:
    assert (await RateLimiter(redis, keys).charge("k4", 0, 0, 10**9)).allowed
    assert [k async for k in redis.scan_iter(match=f"{keys.prefix}:*")] == []


async def test_a_new_window_starts_afresh(redis: aioredis.Redis, keys: RedisKeys) -> None:
    limiter = RateLimiter(redis, keys, window_s=1)
    await clear_of_window_edge(redis, window_s=1, margin_s=0.3)
    assert (await limiter.charge("k5", 1, 0, 1)).allowed
    refused = await limiter.charge("k5", 1, 0, 1)
    assert not refused.allowed
    await asyncio.sleep(refused.retry_after_s + 0.05)
    assert (await limiter.charge("k5", 1, 0, 1)).allowed


async def test_refund_gives_back_unused_tokens_in_the_charged_window(
    redis: aioredis.Redis, keys: RedisKeys
) -> None:
    limiter = RateLimiter(redis, keys)
    await clear_of_window_edge(redis)
    first = await limiter.charge("k6", 0, 100, 90)
    assert first.allowed
    assert not (await limiter.charge("k6", 0, 100, 20)).allowed
    assert await limiter.refund("k6", first.window, 70) == 70
    assert (await limiter.charge("k6", 0, 100, 20)).allowed  # 20 + 20 used now
    assert await limiter.refund("k6", first.window, 500) == 40  # never below zero
    assert await limiter.refund("k6", first.window - 1, 10) == 0  # a window that is gone: nothing


async def test_a_refund_sent_without_waiting_lands_once_also_when_redis_lacks_the_script(
    redis: aioredis.Redis, keys: RedisKeys
) -> None:
    """``refund_nowait`` returns at once (no round trip on the request's settle); each refund lands
    once: one sent on the open connection, one after a SCRIPT FLUSH (NOSCRIPT: the awaited call loads
    it)."""
    limiter = RateLimiter(redis, keys)
    await clear_of_window_edge(redis)
    first = await limiter.charge("k9", 0, 100, 90)  # the connection is open and the charge counted
    counter = (keys.rate("k9"), f"tpm:{first.window}")

    async def used() -> int:
        return int(await redis.hget(*counter) or 0)

    limiter.refund_nowait("k9", first.window, 30)
    assert len(limiter._sent) == 1  # sent; its reply not waited for
    await until(lambda: used_is(used, 60), 5.0, "the refund landed")
    await redis.script_flush()
    limiter.refund_nowait("k9", first.window, 20)
    await until(lambda: used_is(used, 40), 5.0, "the refund after NOSCRIPT landed")
    await until(lambda: not limiter._sent and not limiter._tasks, 5.0, "nothing left under way")
    assert await used() == 40


async def used_is(used: Callable[[], Awaitable[int]], count: int) -> bool:
    return await used() == count


async def test_a_refund_that_fails_is_logged_not_raised(
    tmp_path: Path, keys: RedisKeys, caplog: pytest.LogCaptureFixture
) -> None:
    server = start_redis(tmp_path / "gone")
    client = aioredis.Redis.from_url(f"redis://127.0.0.1:{server.port}/0")
    limiter = RateLimiter(client, keys)
    try:
        first = await limiter.charge("k10", 0, 100, 90)
        server.stop()
        with caplog.at_level(logging.WARNING, logger="llmgw.auth"):
            limiter.refund_nowait("k10", first.window, 30)
            await until(lambda: "30 unused tokens not refunded" in caplog.text, 5.0, "the failure logged")
    finally:
        server.stop()
        await limiter.aclose()
