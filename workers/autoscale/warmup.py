"""Keeping what a start from zero reads in the page cache, so that it costs the same the first time.

A model whose rule lets it go to zero (``min_replicas: 0``) is started while requests wait, and the
gateways tell them the model's measured cold start as the ETA. The first start on a host whose page
cache does not hold the engine's code and the model's files reads them from disk and is slower than the
later ones (measured on CPU vLLM: about 1.5 s more for the engine's imports and 0.5 s for 1 GiB of
weights, more on slower disks), so its sample would make the next ETA too long.

:class:`Warmup` runs as its own supervised loop in the control plane. Every ``every_s`` it reads ahead
(:mod:`workers.replica.prewarm`), for each such model that has no replica and was not warmed in the last
``rewarm_s``, what the model's next start reads: the engine's import, in a throwaway process at the
lowest CPU priority (once per tick for the models that share it), and the local files its command line
names, in a thread. :meth:`Warmup.warm` tells whether a model's files were warmed (:attr:`warmed`: when
it last finished). A model whose files are larger than half of the host's available memory is not read
(logged once). A failed import is logged; the files are read anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable

from llmgw_contract.replica_metrics import SupervisorMetrics
from llmgw_contract.scaling import scaling_rule
from llmgw_contract.supervision import every
from workers.autoscale.loop import next_start
from workers.converge.headroom import host_available_bytes
from workers.converge.loop import Reconciler
from workers.replica.prewarm import WarmPlan, read_files, warm_plan

log = logging.getLogger("llmgw.autoscale")
IMPORT_DEADLINE_S = 600.0
"""An engine import still running after this long is killed (the files are read anyway)."""


class Warmup:
    """The page-cache warm-up of the models that can start from zero (see the module doc)."""

    def __init__(
        self,
        rec: Reconciler,
        metrics: SupervisorMetrics,
        every_s: float = 5.0,
        rewarm_s: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
        available: Callable[[], int | None] = host_available_bytes,
    ) -> None:
        self.rec, self.metrics, self.every_s, self.rewarm_s = rec, metrics, every_s, rewarm_s
        self.clock, self.available = clock, available
        self.warmed: dict[str, float] = {}
        """When each model's warm-up last finished (``clock``)."""

    async def run(self) -> None:
        await every("warmup", self.every_s, self.tick, self.rec.sup.stopping, self.metrics.failed)

    def warm(self, model: str) -> bool:
        """Whether ``model``'s start files were read ahead (at least once)."""
        return model in self.warmed

    def due(self) -> list[str]:
        """The models at zero with a rule that allows it, not warmed in the last ``rewarm_s``."""
        fleet = self.rec.fleet
        if fleet is None:
            return []
        now, listed = self.clock(), {r.spec.model.name for r in self.rec.sup.replicas}
        return [
            m.name
            for m in fleet.models
            if m.managed and scaling_rule(m).min_replicas == 0 and m.name not in listed
            and now - self.warmed.get(m.name, -self.rewarm_s) >= self.rewarm_s
        ]  # fmt: skip

    def plan(self, model: str) -> WarmPlan | None:
        """What ``model``'s next start reads (its launch as the reconciler would start it)."""
        spec = next_start(self.rec, model, 1)
        return None if spec is None else warm_plan(self.rec.launch_for(spec))

    async def tick(self) -> None:
        imported: set[tuple[str, ...]] = set()
        for model in self.due():
            plan = self.plan(model)
            if plan is None:
                continue
            started = self.clock()
            if plan.imports is not None and plan.imports not in imported:
                imported.add(plan.imports)
                await import_engine(plan.imports, plan.env, model)
            read = await asyncio.to_thread(read_files, plan.paths, self.available())
            self.warmed[model] = self.clock()
            if read.skipped:
                log.info("warmup model=%s files not read: %s", model, read.skipped)
            log.info("warmup model=%s read ahead: the engine's import and %d files (%d MiB) in %.1f s",
                     model, read.files, read.bytes >> 20, self.clock() - started)  # fmt: skip


async def import_engine(argv: tuple[str, ...], env: dict[str, str], model: str) -> None:
    """Run the engine's import (its files enter the page cache); a failure or a stall is logged."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, **env},
    )  # fmt: skip
    try:
        async with asyncio.timeout(IMPORT_DEADLINE_S):
            _, err = await proc.communicate()
    except TimeoutError:
        log.warning("warmup model=%s the engine's import did not end in %.0f s", model, IMPORT_DEADLINE_S)
        return
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] if err else []
        log.warning("warmup model=%s the engine's import failed (exit %s): %s", model, proc.returncode,
                    tail[0] if tail else "")  # fmt: skip
