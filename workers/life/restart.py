"""Restarting a replica that died: wait for its process to exit, then start it again after a back-off
that grows over consecutive failures (failed starts included), until a start succeeds or the policy's
``give_up_after`` is passed (then it is left FAILED)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from llmgw_contract.registry import ReplicaState
from llmgw_contract.replica_metrics import SupervisorMetrics
from workers.life.replica import Replica, RestartBackoff
from workers.life.starting import Move

log = logging.getLogger("llmgw.workers")


class Restarts:
    """The watch of each running replica: restart on death, FAILED past the policy."""

    def __init__(
        self,
        policy: RestartBackoff,
        move: Move,
        start: Callable[[Replica], Awaitable[bool]],
        ended: Callable[[Replica], bool],
        metrics: SupervisorMetrics,
    ) -> None:
        self.policy, self.move, self.start, self.ended, self.metrics = policy, move, start, ended, metrics

    async def watch(self, r: Replica) -> None:
        """Wait for the process to die, then restart it (see the module doc). The count of restarts in a
        row, its reset, the delays and the give-up are the policy's one rule (:class:`RestartBackoff`)."""
        policy = self.policy
        consecutive = 0
        while not self.ended(r):
            await r.process.wait_exit()
            if self.ended(r):
                return
            ran = time.monotonic() - r.started_at
            consecutive = policy.consecutive_after(consecutive, ran)
            log.warning("replica=%s died (exit %s) after %.0f s", r.spec.id, r.process.returncode(), ran)
            while not policy.gives_up(consecutive):
                if await self.restart(r, policy.delay(consecutive)):
                    break
                if self.ended(r):
                    return
                consecutive = policy.consecutive_after(consecutive, 0.0)  # a failed start ran for no time
            else:
                log.error(
                    "replica=%s gave up after %d consecutive failed restarts: left failed",
                    r.spec.id, consecutive - 1,
                )  # fmt: skip
                self.metrics.actions.labels("restart", r.spec.model.name, "gave_up").inc()
                why = f"it died and {consecutive - 1} restarts in a row failed"
                await self.move(r, ReplicaState.FAILED, why)
                return

    async def restart(self, r: Replica, delay: float) -> bool:
        """One restart after ``delay``; True when the replica is ready again."""
        r.restarts += 1
        log.warning("replica=%s restart %d in %.1f s", r.spec.id, r.restarts, delay)
        await self.move(r, ReplicaState.STARTING)
        await r.process.stop(1.0)
        await asyncio.sleep(delay)
        if self.ended(r):
            return False
        ok = await self.start(r)
        self.metrics.actions.labels("restart", r.spec.model.name, "ok" if ok else "failed").inc()
        return ok
