"""A keyed stream's events: each SSE event the gateway relays gets an ``id:`` (:class:`EventIds`), and
the events of a stream with an ``Idempotency-Key`` are kept in Redis as they pass (:class:`EventLog`):
one Redis stream per key, entry ``0-<n>`` for the event of id ``n``, bounded (``MAXLEN ~``) and expiring,
written in batches (one pipeline per batch, never a round trip per event); an ``end`` entry after the
last event. A client that comes back with ``Last-Event-ID: n`` reads the entries after ``0-n``: the same
bytes the first client got after that event, ``id:`` lines included."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

Event = tuple[int, bytes]
"""(id, the event's bytes as relayed: ``id: <n>\\n`` then the event, up to its blank line)."""


class EventIds:
    """Cuts relayed bytes into SSE events (at their blank line) and puts ``id: <n>`` first in each; what
    is left of an unfinished event waits for the next chunk."""

    def __init__(self) -> None:
        self.seq, self.rest = 0, b""

    def feed(self, chunk: bytes) -> list[Event]:
        data, out = self.rest + chunk if self.rest else chunk, []
        start = 0
        while (end := data.find(b"\n\n", start)) >= 0:
            self.seq += 1
            out.append((self.seq, b"id: %d\n" % self.seq + data[start : end + 2]))
            start = end + 2
        self.rest = data[start:]
        return out

    def tail(self) -> list[Event]:
        """An unfinished last event (a stream cut mid-event), as it came, under the next id."""
        if not self.rest:
            return []
        self.seq += 1
        rest, self.rest = self.rest, b""
        return [(self.seq, rest)]


def last_event_id(header: str | None) -> int | None:
    """The id a client resumes after (``Last-Event-ID``); None without one or for one not ours."""
    if header is None or not header.strip().isdigit():
        return None
    return int(header.strip())


class EventLog:
    """Appends, reads and drops the event streams of keyed streams."""

    def __init__(self, redis: aioredis.Redis, max_events: int) -> None:
        self.redis, self.max_events = redis, max_events

    async def append(self, key: str, events: Sequence[Event], ttl_ms: int, end: bool = False) -> None:
        """One batch, in one round trip; ``end`` adds the end entry after it."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for seq, event in events:
                pipe.xadd(key, {"e": event}, id=f"0-{seq}", maxlen=self.max_events, approximate=True)
            if end:
                pipe.xadd(key, {"end": 1}, maxlen=self.max_events, approximate=True)
            pipe.pexpire(key, ttl_ms)
            await pipe.execute()

    async def after(self, key: str, seq: int, count: int = 512) -> list[tuple[int, bytes | None]]:
        """The entries after event ``seq``: (id, event), and (id, None) for the end."""
        found: Any = await self.redis.xrange(key, min=f"(0-{seq}", max="+", count=count)
        return [(int(bytes(i).rpartition(b"-")[2]), fields.get(b"e")) for i, fields in found]

    async def drop(self, key: str) -> None:
        await self.redis.delete(key)
