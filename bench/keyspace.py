"""What the periodic reads cost as Redis fills with unrelated keys (``python -m bench.keyspace``).

A real redis-server on loopback; the registry read (4 models x 8 replicas) and the presence beat (8
gateways), each the median of ``--repeats`` runs, first on an empty Redis, then with ``--keys`` unrelated
keys (stored Responses records and the like, written in batches of MSET). It prints the milliseconds of each
and the ratio against the empty Redis measured in the same process: no keyspace scan means a ratio near 1.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis.asyncio as aioredis

from gateway.admission.presence import Presence
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord, publish, read_registry
from testing.procs import start_redis

BATCH = 10_000


async def median_ms(step: Callable[[], Awaitable[object]], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        await step()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def measure(redis: aioredis.Redis, keys: RedisKeys, repeats: int) -> tuple[float, float]:
    gateways = [Presence(redis, keys, f"gw-{i}", 30) for i in range(8)]
    registry = await median_ms(lambda: read_registry(redis, keys), repeats)
    beat = await median_ms(lambda: gateways[0].beat(), repeats)
    return registry, beat


async def fill(redis: aioredis.Redis, keys: RedisKeys, count: int) -> None:
    for start in range(0, count, BATCH):
        batch = {keys.response("m", f"resp-{i}"): b"{}" for i in range(start, min(count, start + BATCH))}
        await redis.mset(batch)


async def main(count: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_redis(Path(tmp) / "redis")
        redis = aioredis.Redis.from_url(f"redis://127.0.0.1:{proc.port}/0")
        keys = RedisKeys()
        try:
            for m in range(4):
                for r in range(8):
                    await publish(
                        redis, keys, ReplicaRecord(id=f"m{m}-{r}", model=f"m{m}", url="http://x"), 60
                    )
            for g in range(8):
                await Presence(redis, keys, f"gw-{g}", 60).beat()
            empty = await measure(redis, keys, repeats)
            await fill(redis, keys, count)
            full = await measure(redis, keys, repeats)
            size = await redis.dbsize()
        finally:
            await redis.aclose()
            proc.stop()
    print(f"keys in Redis: {size:,} ({count:,} unrelated)")
    for name, a, b in (("registry read", empty[0], full[0]), ("presence beat", empty[1], full[1])):
        print(f"{name}: {a:.3f} ms empty, {b:.3f} ms full, ratio {b / a:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.keys, args.repeats))
