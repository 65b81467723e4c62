"""The task-supervision helper: a failed step is logged and counted and the loop goes on; a task that
ends while the process runs is reported at once."""

from __future__ import annotations

import asyncio

import pytest

from contract.supervision import TaskGroup, guarded


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
