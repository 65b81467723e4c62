"""A keyed stream's events in Redis (real redis-server): one entry, one XADD, per batch; a resume after any
event id, in the middle of a batch too, gets exactly the events after it, then the end."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.idempotency.events import Event, EventLog


def events(first: int, last: int) -> list[Event]:
    return [(n, b"id: %d\ndata: %d\n\n" % (n, n)) for n in range(first, last + 1)]


@pytest.fixture
async def log(redis_url: str) -> AsyncIterator[tuple[EventLog, str]]:
    redis = aioredis.Redis.from_url(redis_url)
    key = f"test:events:{uuid.uuid4().hex}"
    yield EventLog(redis, 1000), key
    await redis.delete(key)
    await redis.aclose()


async def test_a_batch_is_one_entry_and_a_resume_mid_batch_gets_the_rest(log: tuple[EventLog, str]) -> None:
    events_log, key = log
    await events_log.append(key, events(1, 5), 60_000)
    await events_log.append(key, events(6, 8), 60_000, end=True)
    assert await events_log.redis.xlen(key) == 3  # two batches and the end
    assert await events_log.after(key, 3) == [*events(4, 8), (0, None)]
    assert await events_log.after(key, 5) == [*events(6, 8), (0, None)]
    assert await events_log.after(key, 8) == [(0, None)]
    assert await events_log.after(key, 0, count=1) == events(1, 5)
    assert 0 < await events_log.redis.pttl(key) <= 60_000
