"""The task-supervision helper: a failed step is logged and counted and the loop goes on (tried again after
the one back-off, never later than its interval); a task that ends while the process runs is reported at
once."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from llmgw_contract.backoff import Backoff
from llmgw_contract.supervision import TaskGroup, every, guarded
from testing.poll import until


async def test_a_failed_step_is_logged_counted_and_swallowed(caplog: pytest.LogCaptureFixture) -> None:
    counted: list[tuple[str, str]] = []

    async def boom() -> None:
        raise FileNotFoundError("taskset")

    assert not await guarded("start", boom(), lambda a, s: counted.append((a, s)), "m")
    assert counted == [("start", "m")]
    assert "action=start subject=m failed" in caplog.text and "FileNotFoundError: taskset" in caplog.text


async def test_a_task_that_dies_or_ends_sets_died_and_is_counted() -> None:
    counted: list[str] = []
    group = TaskGroup(lambda a, s: counted.append(a))

    async def dies() -> None:
        raise RuntimeError("bug")

    async def runs() -> None:
        await asyncio.Event().wait()

    group.spawn("runs", runs())
    group.spawn("dies", dies())
    assert await asyncio.wait_for(group.wait_died_or(asyncio.Event()), 5)
    assert group.dead == ["dies"] and counted == ["dies"]
    await group.close()
    assert all(t.done() for t in group.tasks.values())


async def test_closing_is_no_death() -> None:
    group = TaskGroup()

    async def runs() -> None:
        await asyncio.Event().wait()

    group.spawn("runs", runs())
    stop = asyncio.Event()
    stop.set()
    assert not await group.wait_died_or(stop)
    await group.close()
    assert not group.died.is_set()


async def test_a_loop_tries_a_failed_step_again_after_the_back_off_never_later_than_its_interval() -> None:
    """A heartbeat every 30 s whose beat failed twice is not left to wait 30 s: it beats again after
    0.05 s, then 0.1 s (the back-off of its failures in a row), then keeps its interval."""
    counted: list[str] = []
    runs: list[float] = []

    async def beat() -> None:
        runs.append(asyncio.get_running_loop().time())
        if len(runs) <= 2:
            raise ConnectionError("redis")

    stop = asyncio.Event()
    loop = asyncio.create_task(every("beat", 30.0, beat, stop, lambda a, s: counted.append(a), Backoff(0.05)))
    await until(lambda: len(runs) == 3, 5, "the third beat")
    stop.set()
    await asyncio.wait_for(loop, 1)
    assert counted == ["beat", "beat"] and len(runs) == 3
    gaps = [b - a for a, b in itertools.pairwise(runs)]
    assert 0.04 <= gaps[0] < 0.5 and 0.09 <= gaps[1] < 0.5  # (a timer may fire a tick early)


async def test_a_cancel_a_step_swallowed_still_ends_the_loop() -> None:
    """On Python 3.11, ``asyncio.wait_for`` returns its result when the cancel arrives in the loop
    iteration that result does (redis-py awaits each command's send that way under a socket_timeout): the
    step then finishes as if nothing happened. The loop ends all the same, at its next turn; before, it
    ran on (its stop event is set only later in a shutdown), and the shutdown waited for it for ever."""
    cancelled_once = asyncio.Event()
    runs = 0

    async def step() -> None:
        nonlocal runs
        runs += 1
        try:
            await asyncio.sleep(0.5)
        except asyncio.CancelledError:  # swallowed, as 3.11's wait_for does in that iteration
            cancelled_once.set()

    stop = asyncio.Event()
    loop = asyncio.create_task(every("tick", 0.01, step, stop))
    await until(lambda: runs == 1, 5, "the first step")
    loop.cancel()
    try:
        done, _ = await asyncio.wait([loop], timeout=2)
    finally:
        stop.set()  # (ends a loop that ran on, so that the failure is reported)
    assert loop in done and loop.cancelled()
    assert cancelled_once.is_set() and runs == 1
