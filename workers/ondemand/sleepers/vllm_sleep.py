"""vLLM's GPU sleep mode (the replica runs with ``--enable-sleep-mode`` and ``VLLM_SERVER_DEV_MODE=1``):
sleep = ``POST /sleep?level=N``; wake from level 1 = ``POST /wake_up``; wake from level 2 =
``POST /wake_up?tags=weights``, ``POST /collective_rpc {"method": "reload_weights"}`` (from disk),
``POST /wake_up?tags=kv_cache``. A replica whose process is not running (never started, or stopped) is
started instead. Only this module calls these endpoints; the gateway never forwards them."""

from __future__ import annotations

import logging
import time

import httpx

from workers.life.owner import Replica
from workers.life.process import StartFailed
from workers.ondemand.sleepers.level import SleepLevel
from workers.ondemand.sleepers.process_stop import ProcessStop

log = logging.getLogger("llmgw.ondemand")
SLEEP_TIMEOUT_S = 300.0
"""Level 1 copies the weights to host RAM: about 10 s for 13 GiB on an H200, more for larger models."""

WAKE_STEPS: dict[int, tuple[tuple[str, dict[str, str] | None], ...]] = {
    1: (("/wake_up", None),),
    2: (
        ("/wake_up?tags=weights", None),
        ("/collective_rpc", {"method": "reload_weights"}),
        ("/wake_up?tags=kv_cache", None),
    ),
}
"""The calls that wake a replica from each level, in order."""


class VllmSleep:
    """:class:`workers.ondemand.sleepers.Sleeper` over vLLM's sleep endpoints (level 0: the process stops)."""

    name = "vllm_sleep"

    def __init__(self, client: httpx.AsyncClient, ready_deadline_s: float) -> None:
        self.client = client
        self.stopper = ProcessStop(client, ready_deadline_s)

    async def post(self, r: Replica, path: str, body: dict[str, str] | None = None) -> float:
        """One POST to the replica's dev endpoint; its seconds. StartFailed unless it answers 200."""
        started = time.monotonic()
        resp = await self.client.post(r.spec.url + path, json=body, timeout=SLEEP_TIMEOUT_S)
        if resp.status_code != 200:
            raise StartFailed(f"POST {path} answered {resp.status_code}: {resp.text[:300]}")
        return time.monotonic() - started

    async def sleep(self, r: Replica, level: SleepLevel) -> None:
        if level == 0:
            await self.stopper.sleep(r, level)
            return
        took = await self.post(r, f"/sleep?level={level}")
        log.info("replica=%s vllm sleep level %d in %.2f s", r.spec.id, level, took)

    async def wake(self, r: Replica, level: SleepLevel) -> None:
        if not r.process.alive or level == 0:
            await self.stopper.wake(r, level)
            return
        steps = [f"{path} {await self.post(r, path, body):.2f} s" for path, body in WAKE_STEPS[level]]
        log.info("replica=%s vllm wake from level %d: %s", r.spec.id, level, ", ".join(steps))
