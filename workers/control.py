"""The control plane's three loops, run and stopped together: the supervisor (watches and restarts
replicas), the reconciler (converges to the fleet file) and the activator (wakes and puts to sleep
on-demand models). One shutdown order serves the CLI's SIGTERM drain, the tests and the benchmarks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from workers.activator import Activator
from workers.reconciler import Reconciler
from workers.supervisor import Supervisor


async def stop_loops(sup: Supervisor, act: Activator, loops: list[asyncio.Task[None]]) -> None:
    """The activator told to close, the reconciler's and activator's ``loops`` cancelled and awaited,
    then the supervisor drained (its replicas drain and stop; its own loop then ends)."""
    act.close()
    for task in loops:
        task.cancel()
    await asyncio.gather(*loops, return_exceptions=True)
    await sup.drain()


@asynccontextmanager
async def control_loops(sup: Supervisor, rec: Reconciler, act: Activator) -> AsyncIterator[None]:
    """The three loops as tasks while the block runs; stopped by :func:`stop_loops` when it ends."""
    supervising = asyncio.create_task(sup.run())
    loops = [asyncio.create_task(rec.run()), asyncio.create_task(act.run())]
    try:
        yield
    finally:
        await stop_loops(sup, act, loops)
        await supervising
