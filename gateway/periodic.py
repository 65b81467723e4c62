"""Background loops owned by the lifespan: run a step every interval until told to stop.

Stopping is by an event, not only by cancellation, so a library that swallows a
CancelledError (redis-py has done so) cannot keep a loop alive past shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("llmgw.tasks")


async def every(interval_s: float, step: Callable[[], Awaitable[None]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await step()
        except Exception:
            log.exception(
                "background step %s failed; it runs again next interval", getattr(step, "__name__", step)
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)


class Background:
    """Starts the loops, and on close sets the stop event, then waits (cancelling past a deadline)."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, interval_s: float, step: Callable[[], Awaitable[None]]) -> None:
        self.tasks.append(asyncio.create_task(every(interval_s, step, self.stop)))

    async def close(self, deadline_s: float = 3.0) -> None:
        self.stop.set()
        _, pending = await asyncio.wait(self.tasks, timeout=deadline_s) if self.tasks else (set(), set())
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
