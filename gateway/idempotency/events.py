"""A keyed stream's events: each SSE event the gateway relays gets an ``id:`` (:class:`EventIds`), and
the events of a stream with an ``Idempotency-Key`` are kept in Redis as they pass (:class:`EventLog`):
one Redis stream per key, one entry per batch of events (entry ``0-<n>`` with ``n`` its last event's id,
a field per event named by its id: one XADD a batch, never a command per event), bounded (``MAXLEN ~``,
in entries) and expiring; an ``end`` entry after the last event. A client that comes back with
``Last-Event-ID: n`` reads the entries after ``0-n`` and the events in them after ``n``: the same bytes
the first client got after that event, ``id:`` lines included."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.typing import EncodableT, FieldT

Event = tuple[int, bytes]
"""(id, the event's bytes as relayed: ``id: <n>\\n`` then the event, up to its blank line)."""
Verdict = Literal["running", "over"] | bytes
"""What a follower learns when no new event is there: the writer runs on (look again), it is over (one
more look, for events written before, then the end), or the last bytes to send (an error event)."""
POLL_FIRST_S, POLL_MAX_S = 0.01, 0.1


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
        """One batch as one entry, in one round trip; ``end`` adds the end entry after it."""
        async with self.redis.pipeline(transaction=False) as pipe:
            if events:
                fields: dict[FieldT, EncodableT] = {str(seq): event for seq, event in events}
                pipe.xadd(key, fields, id=f"0-{events[-1][0]}", maxlen=self.max_events, approximate=True)
            if end:
                pipe.xadd(key, {"end": 1}, maxlen=self.max_events, approximate=True)
            pipe.pexpire(key, ttl_ms)
            await pipe.execute()

    async def after(self, key: str, seq: int, count: int = 512) -> list[tuple[int, bytes | None]]:
        """The events after event ``seq``, from up to ``count`` entries: (id, event), and (0, None) for
        the end."""
        found: Any = await self.redis.xrange(key, min=f"(0-{seq}", max="+", count=count)
        out: list[tuple[int, bytes | None]] = []
        for _, fields in found:
            if b"end" in fields:
                out.append((0, None))
                continue
            out += sorted((int(k), v) for k, v in fields.items() if int(k) > seq)
        return out

    async def drop(self, key: str) -> None:
        await self.redis.delete(key)


async def tail(
    events: EventLog, key: str, after: int, verdict: Callable[[], Awaitable[Verdict]]
) -> AsyncIterator[bytes]:
    """The events of ``key`` after id ``after``, kept then live as they are written, to the end entry; while
    none is new, ``verdict`` says whether to look again (polled from ``POLL_FIRST_S``, doubling to
    ``POLL_MAX_S``), to end after one more look, or to end with the bytes it gives."""
    interval, last_look = POLL_FIRST_S, False
    while True:
        entries = await events.after(key, after)
        if entries:
            interval, out = POLL_FIRST_S, list[bytes]()
            for seq, event in entries:
                if event is None:
                    yield b"".join(out)
                    return
                out.append(event)
                after = seq
            yield b"".join(out)
            continue
        said = await verdict()
        if isinstance(said, bytes):
            yield said
            return
        if said == "over":
            if last_look:
                return
            last_look = True
            continue
        await asyncio.sleep(interval)
        interval = min(POLL_MAX_S, interval * 2)
