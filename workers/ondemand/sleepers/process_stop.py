"""Sleep = stop the replica's process; wake = start it and wait until it lists its model. The CPU path
(vLLM's CPU build has no sleep mode) and the fallback for a GPU replica whose sleep keeps too much."""

from __future__ import annotations

import httpx

from workers.life.owner import Replica
from workers.ondemand.sleepers.level import SleepLevel


class ProcessStop:
    """:class:`workers.ondemand.sleepers.Sleeper` that stops and starts the process (the level is ignored)."""

    name = "process_stop"

    def __init__(self, client: httpx.AsyncClient, ready_deadline_s: float) -> None:
        self.client, self.ready_deadline_s = client, ready_deadline_s

    async def sleep(self, r: Replica, level: SleepLevel) -> None:
        await r.process.stop()

    async def wake(self, r: Replica, level: SleepLevel) -> None:
        await r.process.start()
        r.startup_s = await r.process.wait_until_listed(
            r.spec.url, r.spec.model.name, self.ready_deadline_s, self.client
        )
