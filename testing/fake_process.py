"""FAKE PROCESS: a replica process double with no OS process behind it, for tests that drive the
supervisor's real owner (:class:`workers.life.owner.Supervisor`) through its verbs fast and without I/O.

It is a :class:`workers.life.process.ReplicaProcess` whose start, readiness, death and stop are decided by
the test: :attr:`FakeProcess.fail_starts` makes the next starts fail as a replica that exits while
starting does (``StartFailed``), :meth:`FakeProcess.die` ends it as a crash (kill -9) would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx

from workers.life.process import ReplicaProcess, StartFailed
from workers.replica.launch import Launch


class FakeProcess(ReplicaProcess):
    """A replica process the test starts, fails and kills (see the module doc)."""

    def __init__(self, launch: Launch, log_file: Path, pids: Iterator[int]) -> None:
        super().__init__(launch, log_file)
        self.pids = pids
        self.fake_pid: int | None = None
        self.running = False
        self.exited = asyncio.Event()
        self.exited.set()
        self.fail_starts = 0
        """The next this many readiness waits fail (the process exits while starting)."""
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self.fake_pid

    @property
    def alive(self) -> bool:
        return self.running

    def returncode(self) -> int | None:
        return None if self.running or self.fake_pid is None else -9

    async def start(self) -> None:
        self.starts += 1
        self.spawning = True  # told to the owner before and after, as a real spawn is
        self.spawned()
        self.fake_pid, self.running, self.spawning = next(self.pids), True, False
        self.exited = asyncio.Event()
        self.spawned()

    async def wait_until_listed(
        self, url: str, served: str, deadline_s: float, client: httpx.AsyncClient
    ) -> float:
        await asyncio.sleep(0)
        if self.fail_starts > 0 or not self.running:
            self.fail_starts = max(0, self.fail_starts - 1)
            self.die()
            raise StartFailed("exited with code -9 while starting (FAKE PROCESS)")
        return 0.0

    def die(self) -> None:
        """The process ends now (as after kill -9)."""
        self.running = False
        self.exited.set()

    async def wait_exit(self) -> None:
        await self.exited.wait()

    async def stop(self, grace_s: float | None = None) -> None:
        self.die()
