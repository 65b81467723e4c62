"""How an on-demand replica goes to sleep and wakes, one strategy per module behind :class:`Sleeper`:
:mod:`.process_stop` (stop and start the process: the CPU path, and any replica without sleep mode) and
:mod:`.vllm_sleep` (vLLM's GPU sleep mode, levels 1 and 2). :mod:`.level` holds the pure choice of level.
The activator drains a replica before ``sleep`` and warms it up (one decoded token) after ``wake``."""

from __future__ import annotations

from typing import Protocol

from workers.life.owner import Replica
from workers.ondemand.sleepers.level import SleepLevel


class Sleeper(Protocol):
    """One way to put a drained replica to sleep and to bring it back until it lists its model."""

    name: str

    async def sleep(self, r: Replica, level: SleepLevel) -> None:
        """Put the idle replica to sleep at ``level``; raises StartFailed or httpx.HTTPError on failure."""
        ...

    async def wake(self, r: Replica, level: SleepLevel) -> None:
        """Bring it back from ``level`` (the level it slept at) until it serves; raises StartFailed or
        httpx.HTTPError on failure."""
        ...
