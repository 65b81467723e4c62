"""A KV-event stream that stops without a disconnect: the publisher process frozen (SIGSTOP), its
publishing thread stuck (nothing sent, the replay endpoint unanswered, the sockets open), or its
connections black-holed. The feed finds it by a replay probe, resets the replica's entries and is
approximate (logged, counted), and once the publisher answers again the index is right after one replay.
Against the publisher double in testing/kv_publisher.py (vLLM's wire format, a process of its own, whose
format a test compares with vLLM's own encoder) and a real Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import pytest
import redis.asyncio as aioredis

from llmgw_contract.kv_endpoints import KvEndpoints
from llmgw_contract.kv_events import BlockKeyer
from llmgw_contract.kv_feed import KvFeed, KvIndexWriter
from llmgw_contract.kv_trust import APPROXIMATE, EXACT, FeedTiming
from llmgw_contract.prefix_chain import chain_keys
from llmgw_contract.redis_keys import RedisKeys
from testing.blackhole import BlackHoleProxy
from testing.kv_publisher import BlockRemoved, BlockStored, KVEventBatch, KvPublisherDouble
from testing.poll import until
from testing.procs import free_port

MODEL = "m"
KEYS = RedisKeys("kvsilent")
KEYER = BlockKeyer(lambda ids: "".join(map(chr, ids)), None, 8, 64)  # a token is a character
TIMING = FeedTiming(probe_s=0.2, silent_s=1.0)


def keys_of(text: str) -> set[str]:
    return set(chain_keys(text.encode(), 8, 64, full_only=True))


def store(pub: KvPublisherDouble, hashes: list[int], parent: int | None, text: str) -> None:
    pub.stored(hashes, parent, [ord(c) for c in text], 4)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    r = aioredis.from_url(redis_url)
    await r.delete(*[k async for k in r.scan_iter(f"{KEYS.prefix}:*")] or ["-"])
    yield r
    await r.aclose()


@pytest.fixture
def ipc(tmp_path: Path) -> Iterator[tuple[KvEndpoints, KvPublisherDouble]]:
    at = KvEndpoints(f"ipc://{tmp_path}/ev.pub", f"ipc://{tmp_path}/ev.replay")
    pub = KvPublisherDouble(at.events, at.replay)
    yield at, pub
    pub.stop()


async def held(r: aioredis.Redis) -> set[str]:
    return {k.decode() for k in await r.smembers(KEYS.prefix_kv(MODEL, "r0"))}


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_the_double_speaks_vllms_wire_format() -> None:
    from vllm.distributed.kv_events import BlockRemoved as VBlockRemoved
    from vllm.distributed.kv_events import BlockStored as VBlockStored
    from vllm.distributed.kv_events import KVEventBatch as VBatch

    encode = msgspec.msgpack.Encoder().encode
    ours = KVEventBatch(
        1.5, [BlockStored([1, 2], None, [7] * 8, 4, None, "GPU", None), BlockRemoved([3], "GPU")], 0
    )
    theirs = VBatch(
        1.5, [VBlockStored([1, 2], None, [7] * 8, 4, None, "GPU", None), VBlockRemoved([3], "GPU")], 0
    )
    assert encode(ours) == encode(theirs)


@pytest.mark.parametrize("how", ["frozen", "stuck"])
async def test_a_silent_publisher_is_reset_and_right_again_after_one_replay(
    ipc: tuple[KvEndpoints, KvPublisherDouble], redis: aioredis.Redis, how: str
) -> None:
    at, pub = ipc
    feed = KvFeed("r0", "i0", at, KEYER, KvIndexWriter(redis, KEYS, MODEL), TIMING)
    task = asyncio.create_task(feed.run())
    try:
        store(pub, [1, 2], None, "abcdefgh")
        await until(lambda: _is(redis, keys_of("abcdefgh")), 10, "learnt")
        assert feed.mode == EXACT
        pub.freeze() if how == "frozen" else pub.mute()
        await until(lambda: feed.mode == APPROXIMATE, 10, "the silence found")
        assert feed.stats.silences == 1 and not await held(redis)  # its entries are no longer trusted
        await asyncio.sleep(3 * TIMING.silent_s)  # silent for a while: still one silence, no flapping
        assert feed.stats.silences == 1 and feed.mode == APPROXIMATE
        replays = feed.stats.replays
        back = time.monotonic()
        pub.thaw() if how == "frozen" else pub.mute(False)
        await until(lambda: feed.mode == EXACT, 10, "exact again")
        print(f"{how}: exact again {time.monotonic() - back:.2f} s after it answered, "
              f"{feed.stats.replays - replays} replays")  # fmt: skip
        assert await held(redis) == keys_of("abcdefgh")  # right again: the replay refilled it
        store(pub, [3, 4], 2, "ijklmnop")
        await until(lambda: _is(redis, keys_of("abcdefghijklmnop")), 10, "live events again")
    finally:
        await stop(task)


async def test_black_holed_connections_are_replaced_and_the_index_follows(redis: aioredis.Redis) -> None:
    ports = free_port(), free_port()
    pub = KvPublisherDouble(f"tcp://127.0.0.1:{ports[0]}", f"tcp://127.0.0.1:{ports[1]}")
    events, replay = await BlackHoleProxy(ports[0]).start(), await BlackHoleProxy(ports[1]).start()
    at = KvEndpoints(f"tcp://127.0.0.1:{events.port}", f"tcp://127.0.0.1:{replay.port}")
    feed = KvFeed("r0", "i0", at, KEYER, KvIndexWriter(redis, KEYS, MODEL), TIMING)
    task = asyncio.create_task(feed.run())
    try:
        store(pub, [1, 2], None, "abcdefgh")
        await until(lambda: _is(redis, keys_of("abcdefgh")), 10, "learnt over TCP")
        accepted = events.accepted
        events.black_hole()
        replay.black_hole()
        store(pub, [3, 4], 2, "ijklmnop")  # the subscription never sees it
        await until(lambda: _is(redis, keys_of("abcdefghijklmnop")), 10, "found by a probe")
        assert feed.stats.missed >= 1
        await until(lambda: events.accepted > accepted, 10, "subscribed anew")
        store(pub, [5, 6], 4, "qrstuvwx")
        await until(lambda: _is(redis, keys_of("abcdefghijklmnopqrstuvwx")), 10, "the new subscription")
        assert feed.mode == EXACT
    finally:
        await stop(task)
        pub.stop()


async def _is(r: aioredis.Redis, want: set[str]) -> bool:
    return await held(r) == want
