"""The one poll-until-deadline helper of the tests: readiness and conditions are polled, never slept for."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

Check = Callable[[], object | Awaitable[object]]


async def until(
    check: Check, deadline_s: float = 20.0, what: str = "condition", interval_s: float = 0.05
) -> object:
    """``check()``'s result (sync or async) once it is truthy; AssertionError naming ``what`` at the
    deadline."""
    end = time.monotonic() + deadline_s
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if time.monotonic() >= end:
            raise AssertionError(f"{what} not met within {deadline_s:g} s")
        await asyncio.sleep(interval_s)


def wait_until(check: Callable[[], bool], deadline_s: float, what: str, interval_s: float = 0.05) -> None:
    """The same for synchronous code (process start-up in fixtures); TimeoutError at the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(interval_s)
    raise TimeoutError(f"{what} not ready within {deadline_s} s")
