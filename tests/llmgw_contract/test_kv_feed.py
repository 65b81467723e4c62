"""KvFeed against vLLM's own ZMQ publisher (``vllm.distributed.kv_events.ZmqEventPublisher``, no engine) and
a real Redis: batches published before the feed connected come back by replay, a replay the buffer can no
longer fill resets the replica and goes on, and a publisher that starts again resets it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from llmgw_contract.kv_endpoints import KvEndpoints
from llmgw_contract.kv_events import BlockKeyer
from llmgw_contract.kv_feed import KvFeed, KvIndexWriter
from llmgw_contract.kv_trust import EXACT
from llmgw_contract.prefix_chain import chain_keys
from llmgw_contract.redis_keys import RedisKeys
from testing.poll import until

MODEL = "m"
KEYS = RedisKeys("kvfeed")
KEYER = BlockKeyer(lambda ids: "".join(map(chr, ids)), None, 8, 64)  # a token is a character


def publisher(endpoints: KvEndpoints, buffer_steps: int) -> Any:
    from vllm.distributed.kv_events import ZmqEventPublisher

    return ZmqEventPublisher(0, endpoints.events, endpoints.replay, buffer_steps=buffer_steps)


def stored(hashes: list[int], parent: int | None, text: str) -> Any:
    from vllm.distributed.kv_events import BlockStored, KVEventBatch

    ev = BlockStored(hashes, parent, [ord(c) for c in text], 4, None, None, None)
    return KVEventBatch(0.0, [ev])


def removed(hashes: list[int]) -> Any:
    from vllm.distributed.kv_events import BlockRemoved, KVEventBatch

    return KVEventBatch(0.0, [BlockRemoved(hashes, None)])


def keys_of(text: str) -> set[str]:
    return set(chain_keys(text.encode(), 8, 64, full_only=True))


@pytest.fixture
def endpoints(tmp_path: Path) -> KvEndpoints:
    return KvEndpoints(f"ipc://{tmp_path}/ev.pub", f"ipc://{tmp_path}/ev.replay")


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    r = aioredis.from_url(redis_url)
    await r.delete(*[k async for k in r.scan_iter(f"{KEYS.prefix}:*")] or ["-"])
    yield r
    await r.aclose()


@pytest.fixture
def feeds() -> Iterator[list[asyncio.Task[None]]]:
    tasks: list[asyncio.Task[None]] = []
    yield tasks
    for t in tasks:
        t.cancel()


def start(feed: KvFeed, tasks: list[asyncio.Task[None]]) -> KvFeed:
    tasks.append(asyncio.create_task(feed.run()))
    return feed


async def held(r: aioredis.Redis) -> set[str]:
    return {k.decode() for k in await r.smembers(KEYS.prefix_kv(MODEL, "r0"))}


async def test_replay_refills_what_was_published_before_the_feed(
    endpoints: KvEndpoints, redis: aioredis.Redis, feeds: list[asyncio.Task[None]]
) -> None:
    pub = publisher(endpoints, 100)
    try:
        pub.publish(stored([1, 2, 3], None, "abcdefghijkl"))
        pub.publish(stored([4, 5], 3, "mnopqrst"))
        pub.publish(removed([5]))  # "qrst" goes: no key ends in it (the third chunk is not whole)
        writer = KvIndexWriter(redis, KEYS, MODEL)
        feed = start(KvFeed("r0", "i0", endpoints, KEYER, writer), feeds)
        await until(lambda: feed.mode == EXACT, 10, "connected")
        want = keys_of("abcdefghijklmnop")
        await until(lambda: _is(redis, want), 10, "the index refilled by replay")
        pub.publish(stored([6], 4, "uvwx"))  # live again: "qrstuvwx" is no whole chunk of a stored chain
        pub.publish(stored([7], 5, "zzzz"))  # a parent the engine removed: unknown chain, no keys
        pub.publish(stored([8, 9], 4, "qrstuvwx"))
        await until(lambda: _is(redis, keys_of("abcdefghijklmnopqrstuvwx")), 10, "live events")
    finally:
        pub.shutdown()


async def test_a_replay_the_buffer_cannot_fill_resets_and_goes_on(
    endpoints: KvEndpoints, redis: aioredis.Redis, feeds: list[asyncio.Task[None]]
) -> None:
    pub = publisher(endpoints, 2)
    try:
        pub.publish(stored([1, 2], None, "abcdefgh"))
        pub.publish(stored([3], None, "zzzz"))
        pub.publish(stored([4], 2, "ijkl"))  # its parent's batch is no longer buffered
        writer = KvIndexWriter(redis, KEYS, MODEL)
        await redis.sadd(KEYS.prefix_kv(MODEL, "r0"), "stale")
        feed = start(KvFeed("r0", "i0", endpoints, KEYER, writer), feeds)
        await until(lambda: feed.mode == EXACT, 10, "connected")
        assert feed.stats.resets >= 2 and not await held(redis)  # the stale entry is gone, nothing guessed
        pub.publish(stored([5, 6], None, "12345678"))
        await until(lambda: _is(redis, keys_of("12345678")), 10, "events after the loss")
    finally:
        pub.shutdown()


async def test_a_restarted_publisher_resets_the_replica(
    endpoints: KvEndpoints, redis: aioredis.Redis, feeds: list[asyncio.Task[None]]
) -> None:
    pub = publisher(endpoints, 100)
    writer = KvIndexWriter(redis, KEYS, MODEL)
    feed = start(KvFeed("r0", "i0", endpoints, KEYER, writer), feeds)
    try:
        await until(lambda: feed.mode == EXACT, 10, "connected")
        pub.publish(stored([1, 2], None, "abcdefgh"))
        await until(lambda: _is(redis, keys_of("abcdefgh")), 10, "learnt")
    finally:
        pub.shutdown()
    await until(lambda: feed.mode != EXACT, 10, "disconnect seen")
    assert not await held(redis)
    pub = publisher(endpoints, 100)
    try:
        await until(lambda: feed.mode == EXACT, 10, "reconnected")
        pub.publish(stored([7, 8], None, "ponmlkji"))
        await until(lambda: _is(redis, keys_of("ponmlkji")), 10, "the new publisher's events")
    finally:
        pub.shutdown()


async def _is(r: aioredis.Redis, want: set[str]) -> bool:
    return await held(r) == want
