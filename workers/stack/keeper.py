"""Keeps the embedded stack's services up after READY: a gateway, nginx, Redis, Prometheus or the
supervisor that dies is started again after a back-off (:class:`contract.backoff.Backoff`) that grows over
consecutive deaths and resets after a healthy run; each death and each restart is one log line."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from contract.backoff import Backoff
from workers.stack.services import Service

log = logging.getLogger("llmgw.stack")


@dataclass(frozen=True, slots=True)
class KeepPolicy:
    base_s: float = 0.5
    max_s: float = 30.0
    healthy_after_s: float = 60.0
    ready_deadline_s: float = 60.0
    poll_s: float = 0.2


async def keep(service: Service, policy: KeepPolicy) -> None:
    """Restart ``service`` each time it dies, until cancelled."""
    backoff = Backoff(policy.base_s, policy.max_s)
    consecutive, up_since = 0, time.monotonic()
    while True:
        await died(service, policy.poll_s)
        ran = time.monotonic() - up_since
        consecutive = 1 if ran >= policy.healthy_after_s else consecutive + 1
        delay = backoff.delay(consecutive)
        code = service.proc.returncode if service.proc else None
        log.warning("service=%s died (exit %s) after %.0f s; restart %d in %.1f s",
                    service.name, code, ran, consecutive, delay)  # fmt: skip
        await asyncio.sleep(delay)
        await service.stop()  # what is left of its process group
        started = time.monotonic()
        await service.start()
        try:
            await service.wait_until_ready(policy.ready_deadline_s)
        except RuntimeError as exc:
            log.error("service=%s restart %d failed: %s", service.name, consecutive, exc)
            continue
        up_since = time.monotonic()
        log.info("service=%s restarted, ready in %.1f s", service.name, up_since - started)


async def died(service: Service, poll_s: float) -> None:
    if service.proc is not None:
        await service.proc.wait()
    else:
        await asyncio.sleep(poll_s)
