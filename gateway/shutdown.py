"""The requests a gateway still serves when it is told to stop, and their planned end.

On SIGTERM (scale-down, rollout) uvicorn stops accepting connections and waits for the open ones up to
its graceful period, then cuts them. Instead, the gateway gives its open requests ``shutdown_grace_s``
to end on their own, then ends the rest in the API's shape: a stream with an SSE error event then
``data: [DONE]``, a non-streamed request with a 503 and ``Retry-After`` (the client retries elsewhere).
uvicorn's graceful period is longer than that grace (:func:`graceful_s`), so nothing is ever cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

log = logging.getLogger("llmgw.shutdown")

END_MARGIN_S = 10.0


def graceful_s(shutdown_grace_s: float) -> float:
    """uvicorn's graceful period: the grace, then time for the planned ends to reach the clients."""
    return shutdown_grace_s + END_MARGIN_S


class OpenRequests:
    """Each open request registers how to end it; :meth:`stop` ends those still open after the grace."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self.stopping = False
        self._ends: dict[int, Callable[[], None]] = {}
        self._last = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._ends)

    def open(self, end: Callable[[], None]) -> int:
        """Register an open request; ``end`` gives it its planned end. Returns the token for close()."""
        self._last += 1
        self._ends[self._last] = end
        self._idle.clear()
        return self._last

    def close(self, token: int) -> None:
        self._ends.pop(token, None)
        if not self._ends:
            self._idle.set()

    def stop(self) -> None:
        """The gateway was told to stop (called in its event loop): end what is open after the grace."""
        if self.stopping:
            return
        self.stopping = True
        log.info("stopping: %d open request(s) get up to %g s to end", len(self), self.grace_s)
        self._task = asyncio.get_running_loop().create_task(self._end_after_grace())

    async def _end_after_grace(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.grace_s):
                await self._idle.wait()
        if self._ends:
            log.warning("stopping: ending %d open request(s) with a planned error", len(self))
        for end in list(self._ends.values()):
            end()

    async def aclose(self) -> None:
        """Cancel the pending end (the lifespan's shutdown)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
