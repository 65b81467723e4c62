"""Keeps the embedded stack's services up after READY: a gateway, nginx, Redis, Prometheus or the
supervisor that dies is started again after a back-off (:class:`llmgw_contract.backoff.Backoff`) that grows
over consecutive deaths and resets after a healthy run; each death and each restart is one log line.

What is left of a dead service's process group is stopped before the new process starts, except for a
service with a graceful quit signal (nginx): there the survivors (nginx's workers outlive a master killed
-9 and keep serving) get that signal, close their listening sockets, finish the requests they hold, and
exit while the new process starts; after ``leftovers_grace_s`` they are killed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from llmgw_contract.backoff import Backoff
from llmgw_tools.stack.services import Service
from workers.life.adopt import pid_alive

log = logging.getLogger("llmgw.stack")


@dataclass(frozen=True, slots=True)
class KeepPolicy:
    base_s: float = 0.5
    max_s: float = 30.0
    healthy_after_s: float = 60.0
    ready_deadline_s: float = 60.0
    poll_s: float = 0.2
    leftovers_grace_s: float = 60.0


async def keep(service: Service, policy: KeepPolicy) -> None:
    """Restart ``service`` each time it dies, until cancelled."""
    backoff = Backoff(policy.base_s, policy.max_s)
    consecutive, up_since = 0, time.monotonic()
    leftovers: set[asyncio.Task[None]] = set()
    try:
        while True:
            await died(service, policy.poll_s)
            ran = time.monotonic() - up_since
            consecutive = 1 if ran >= policy.healthy_after_s else consecutive + 1
            delay = backoff.delay(consecutive)
            code = service.proc.returncode if service.proc else None
            log.warning("service=%s died (exit %s) after %.0f s; restart %d in %.1f s",
                        service.name, code, ran, consecutive, delay)  # fmt: skip
            await asyncio.sleep(delay)
            await clear_group(service, policy, leftovers)
            started = time.monotonic()
            await service.start()
            try:
                await service.wait_until_ready(policy.ready_deadline_s)
            except RuntimeError as exc:
                log.error("service=%s restart %d failed: %s", service.name, consecutive, exc)
                continue
            up_since = time.monotonic()
            log.info("service=%s restarted, ready in %.1f s", service.name, up_since - started)
    finally:
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)


async def died(service: Service, poll_s: float) -> None:
    if service.proc is not None:
        await service.proc.wait()
    else:
        await asyncio.sleep(poll_s)


def in_group(pid: int, pgid: int) -> bool:
    try:
        return os.getpgid(pid) == pgid
    except OSError:
        return False


def group_members(pgid: int) -> list[int]:
    """The live processes (zombies excluded) of process group ``pgid``."""
    pids = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]
    return [p for p in pids if in_group(p, pgid) and pid_alive(p)]


async def clear_group(service: Service, policy: KeepPolicy, leftovers: set[asyncio.Task[None]]) -> None:
    """What is left of the dead service's group: stopped, or (with a quit signal) sent that signal and
    given ``leftovers_grace_s`` to finish, in a task of ``leftovers``, while the new process starts."""
    pgid = service.pid
    members = group_members(pgid) if pgid is not None and service.quit_signal is not None else []
    if pgid is None or service.quit_signal is None or not members:
        await service.stop()
        return
    for pid in members:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, service.quit_signal)
    log.info("service=%s: %d processes of its group still serve; sent %s to finish their requests "
             "(at most %.0f s)", service.name, len(members), signal.Signals(service.quit_signal).name,
             policy.leftovers_grace_s)  # fmt: skip
    task = asyncio.create_task(let_finish(service.name, pgid, members, policy))
    leftovers.add(task)
    task.add_done_callback(leftovers.discard)


async def let_finish(name: str, pgid: int, members: list[int], policy: KeepPolicy) -> None:
    """Wait for ``members`` to exit; those still there at the grace (or when cancelled) are killed."""
    end = time.monotonic() + policy.leftovers_grace_s
    try:
        while time.monotonic() < end:
            if not any(pid_alive(p) for p in members):
                break
            await asyncio.sleep(policy.poll_s)
    finally:
        left = [p for p in members if pid_alive(p) and in_group(p, pgid)]
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        log.info("service=%s: the old group finished (%d killed at the grace)", name, len(left))
