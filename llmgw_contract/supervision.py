"""Long-lived tasks that never die silently: the control plane's loops, the embedded stack's, a gateway
lifespan's.

Three pieces, one rule each:

* :func:`guarded` runs one step of a loop (one reconcile pass, one tick, one action on a replica). An
  exception other than a cancellation is logged with its traceback, counted through ``failed(action,
  subject)`` (wire it to a counter with ``outcome="failed"``) and swallowed: the loop goes on. It returns
  whether the step finished.
* :func:`every` is such a loop: a step every interval, each one guarded, until a stop event; after a failed
  step the next one comes after the one back-off (:class:`llmgw_contract.backoff.Backoff`) of the failures in
  a row, never later than the interval (a registry heartbeat that failed is tried again within a second).
* :class:`TaskGroup` owns the long-lived tasks of one process. ``spawn(name, coro)`` starts one; a task
  that ends while the group is not closing (it returned, or raised) is logged, counted, and sets
  :attr:`TaskGroup.died`: the process waits on :meth:`TaskGroup.wait_died` beside its stop signal and exits
  non-zero (:data:`EXIT_TASK_DIED`), so its keeper (systemd, Kubernetes, the stack) starts it again.
  ``close(*names)`` cancels and awaits those tasks (all when none is named), newest first;
  ``expect_end(*names)`` says those may now end by themselves (a loop that ends once its owner stops).

Usage::

    tasks = TaskGroup(failed=lambda action, subject: metrics.labels(action, subject, "failed").inc())
    tasks.spawn("reconcile", reconciler.run())
    stopped = await tasks.wait_died_or(stop_event)   # True: a task died
    await tasks.close()
    return EXIT_TASK_DIED if tasks.died.is_set() else 0
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from llmgw_contract.backoff import Backoff

log = logging.getLogger("llmgw.supervision")
RETRY = Backoff()
"""The back-off of a loop's failed steps (1 s, 2 s, 4 s…, never past the loop's interval)."""

Failed = Callable[[str, str], None]
"""``failed(action, subject)``: count one failure (``subject``: the model or replica, "" when none)."""
EXIT_TASK_DIED = 3
"""The exit status of a process whose long-lived task ended when it must not."""


def no_count(action: str, subject: str) -> None:
    """A :data:`Failed` that counts nothing (the log line stays)."""


async def guarded(action: str, step: Awaitable[None], failed: Failed = no_count, subject: str = "") -> bool:
    """Await ``step``; an exception is logged with its traceback and counted, never raised (a
    cancellation is). Returns True when the step finished."""
    try:
        await step
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("action=%s subject=%s failed: logged and counted, the loop goes on", action, subject)
        failed(action, subject)
        return False
    return True


def raise_if_cancelled() -> None:
    """Raise ``CancelledError`` when the running task was asked to cancel and is still running: the cancel
    was swallowed below its caller (see :func:`every`). A loop calls it at each turn."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def every(
    name: str,
    interval_s: float,
    step: Callable[[], Awaitable[None]],
    stop: asyncio.Event,
    failed: Failed = no_count,
    backoff: Backoff = RETRY,
) -> None:
    """Run ``step`` every ``interval_s`` until ``stop`` is set or the task is cancelled, each run
    :func:`guarded` (as ``name``); after ``n`` failed runs in a row the next comes after
    ``min(interval_s, backoff.delay(n))``. A cancel that a step swallowed still ends the loop, at its next
    turn: on Python 3.11 ``asyncio.wait_for`` returns its result when the cancel arrives in the iteration
    that result does (redis-py sends each command that way under a ``socket_timeout``), and a shutdown
    that cancels a loop before it sets the loop's stop event would otherwise wait for it for ever."""
    failures = 0
    while not stop.is_set():
        raise_if_cancelled()
        failures = 0 if await guarded(name, step(), failed) else failures + 1
        wait = min(interval_s, backoff.delay(failures)) if failures else interval_s
        with contextlib.suppress(TimeoutError):  # asyncio.timeout, not wait_for: on 3.11 wait_for can turn
            async with asyncio.timeout(wait):  # a cancel that comes as its timeout fires into a TimeoutError,
                await stop.wait()  # which this loop would swallow and go on (a shutdown that never ended)


class TaskGroup:
    """The long-lived tasks of one process: each must run until :meth:`close` (see the module doc)."""

    def __init__(self, failed: Failed = no_count) -> None:
        self.failed = failed
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        self.closing = False
        self.ending: set[str] = set()
        """Tasks that may end now without it being a death (:meth:`expect_end`, :meth:`close`)."""
        self.died = asyncio.Event()
        """Set once a task ended before :meth:`close`; :attr:`dead` names it."""
        self.dead: list[str] = []

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Start ``coro`` as the task ``name``, watched from now on."""
        task = asyncio.create_task(coro, name=name)
        self.tasks[name] = task
        task.add_done_callback(lambda t: self._ended(name, t))
        return task

    def _ended(self, name: str, task: asyncio.Task[Any]) -> None:
        expected = self.closing or name in self.ending
        if task.cancelled():
            if not expected:
                log.error("task=%s was cancelled while the process runs", name)
                self._died(name)
            return
        exc = task.exception()
        if exc is None and expected:
            return
        if exc is not None:
            log.error("task=%s died", name, exc_info=exc)
        else:
            log.error("task=%s ended while the process runs", name)
        self._died(name)

    def _died(self, name: str) -> None:
        self.failed(name, "")
        self.dead.append(name)
        self.died.set()

    async def wait_died_or(self, stop: asyncio.Event) -> bool:
        """Return once ``stop`` is set or a task died; True when a task died."""
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self.died.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
        return self.died.is_set()

    def expect_end(self, *names: str) -> None:
        """The named tasks may end from now on (an error they end with is still reported)."""
        self.ending.update(names)

    async def join(self, *names: str) -> None:
        """Await the named tasks, which end by themselves (:meth:`expect_end` is implied)."""
        self.expect_end(*names)
        await asyncio.gather(*(self.tasks[n] for n in names), return_exceptions=True)

    async def close(self, *names: str) -> None:
        """Cancel the named tasks (every task when none is named), newest first, and await each."""
        if not names:
            self.closing = True
        self.expect_end(*names)
        chosen = [(n, t) for n, t in self.tasks.items() if not names or n in names]
        for _, task in reversed(chosen):
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def cancelled(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait until each has ended (their errors and cancellations swallowed)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
