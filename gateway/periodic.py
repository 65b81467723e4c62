"""Background loops owned by the lifespan: run a step every interval until told to stop.

Each loop is a long-lived task of a :class:`llmgw_contract.supervision.TaskGroup` running
:func:`llmgw_contract.supervision.every`: a step that raises is logged with its traceback and counted
(``failed(name, "")``; the gateway wires it to ``llmgw_task_failures_total``) and the loop goes on (next
step after the one back-off, never later than its interval); a loop that ends while the gateway runs is
logged and counted too. Stopping is by an event, not only by cancellation, so a library that swallows a
CancelledError (redis-py has done so) cannot keep a loop alive past shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from llmgw_contract.supervision import Failed, TaskGroup, every, no_count


class Background:
    """Starts the loops, and on close sets the stop event, then waits (cancelling past a deadline)."""

    def __init__(self, failed: Failed = no_count) -> None:
        self.stop = asyncio.Event()
        self.failed = failed
        self.group = TaskGroup(failed)

    def start(self, interval_s: float, step: Callable[[], Awaitable[None]], name: str = "") -> None:
        """Run ``step`` every ``interval_s`` as the loop ``name`` (its qualified name by default)."""
        name = name or getattr(step, "__qualname__", "step")
        while name in self.group.tasks:
            name += "'"
        self.group.spawn(name, every(name, interval_s, step, self.stop, self.failed))

    async def close(self, deadline_s: float = 3.0) -> None:
        self.stop.set()
        tasks = list(self.group.tasks.values())
        self.group.expect_end(*self.group.tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=deadline_s)
        await self.group.close()  # cancels what is still running past the deadline
