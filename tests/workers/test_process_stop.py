"""Stopping a replica's process: a cancellation that arrives as the process exits is not lost.

On Python 3.11, ``asyncio.wait_for`` returns the awaited result when the task is cancelled in the same
loop iteration as that result arrives, swallowing the cancel. A scale-down's stop cancelled by the
shutdown at that moment then went on, and the scaler's loop (whose stop event is set only after it ended)
ticked for ever: test_autoscale.py's intermittent 120 s stall."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest

from workers.life.process import ManagedProcess


class ExitingProc:
    """A process that exits when :attr:`exit` is set (its ``wait`` as asyncio's Process has it)."""

    def __init__(self) -> None:
        self.exit = asyncio.Event()
        self.returncode: int | None = None
        self.pid = 0

    async def wait(self) -> int:
        await self.exit.wait()
        self.returncode = 0
        return 0


async def test_a_cancel_arriving_as_the_process_exits_ends_the_stop(tmp_path: Path) -> None:
    p = ManagedProcess(["true"], {}, tmp_path / "log")
    proc = ExitingProc()
    p.proc = cast(Any, proc)
    p.signal_group = lambda sig: None  # type: ignore[method-assign]  # no real process group here
    stopping = asyncio.create_task(p.stop(5.0))
    await asyncio.sleep(0.01)  # it waits for the exit
    proc.exit.set()  # the process exits, and in the same iteration the stop is cancelled
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
