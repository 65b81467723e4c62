"""The GPU reading of a replica just put to sleep, taken off the sleep's path: a wake that waits for this
sleep's room goes on as soon as the replica is ASLEEP, while the reading waits for the card to be still
(another replica's move can take many seconds). A replica that keeps most of its memory asleep is stopped,
and stops instead of sleeping from then on."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from llmgw_contract.registry import ReplicaState
from workers.life.replica import Replica
from workers.ondemand.ledger import Holding
from workers.ondemand.sleepers.level import keeps_most

if TYPE_CHECKING:
    from workers.ondemand.activator import Activator

log = logging.getLogger("llmgw.ondemand")


async def measure_asleep(act: Activator, r: Replica) -> None:
    """What the GPU replica ``r`` holds asleep, into the ledger (not booked if it woke meanwhile)."""
    level = act.levels.get(r.spec.id, 0)
    holding: Holding = "asleep" if level else "stopped"

    def still() -> bool:
        return r.state is ReplicaState.ASLEEP

    held = await act.gpu.measure_gpu(r, holding, f"sleep at level {level}", still)
    awake = act.gpu.book(r).awake.get(r.spec.id, 0)
    if level and held is not None and keeps_most(held, awake):
        log.warning("replica=%s keeps %d of %d MiB asleep: stopped instead, from now on",
                    r.spec.id, held >> 20, awake >> 20)  # fmt: skip
        act.stop_instead.add(r.spec.model.name)
        async with r.lock:
            if not still() or act.levels.get(r.spec.id, 0) == 0:
                return
            await act.put_to_sleep(r, 0)
        await act.gpu.measure_gpu(r, "stopped", "sleep at level 0", still)
