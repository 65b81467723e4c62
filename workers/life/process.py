"""The one process lifecycle: a child in its own process group with its own log, ready when its probe
answers (polled until a deadline), stopped by SIGTERM then SIGKILL to the whole group.

:class:`ManagedProcess` is what the supervisor runs each vLLM replica as (:class:`ReplicaProcess`) and what
the embedded stack (an offline tool) runs Redis, gateways, nginx and Prometheus as
(``llmgw_tools.stack.services.Service``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from llmgw_contract.vllm_probe import listed
from workers.replica.launch import Launch

log = logging.getLogger("llmgw.workers")
Probe = Callable[[], Awaitable[bool]]


class StartFailed(Exception):
    """The process exited or missed its deadline before it became ready."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


async def spawn_logged(
    argv: list[str], env: dict[str, str], log_file: Path, death_signal: int | None = None
) -> asyncio.subprocess.Process:
    """A child in its own process group (so that it can be stopped whole), its output appended to a log.
    With ``death_signal`` the child gets that signal when this process dies, even by SIGKILL (Linux's
    parent-death signal): the embedded stack's services die with it; vLLM replicas are started without
    one, so that a new supervisor adopts them."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out, env={**os.environ, **env},
            start_new_session=True, preexec_fn=None if death_signal is None else die_with(death_signal),
        )  # fmt: skip


PR_SET_PDEATHSIG = 1


def die_with(sig: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child asks the kernel for ``sig`` when its parent dies; if the parent died
    before that (the child was re-parented), the child exits at once."""
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)

    def arm() -> None:
        libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arm


class ManagedProcess:
    """One child process: start, probe until ready, signal its group, stop within a grace period."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        log_file: Path,
        stop_grace_s: float = 10.0,
        death_signal: int | None = None,
    ) -> None:
        self.argv, self.env, self.log_file, self.stop_grace_s = argv, env, log_file, stop_grace_s
        self.death_signal = death_signal
        """Sent to the process when its parent dies (:func:`spawn_logged`); None for vLLM replicas."""
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc else None

    async def start(self) -> None:
        self.proc = await spawn_logged(self.argv, self.env, self.log_file, self.death_signal)

    async def wait_exit(self) -> None:
        """Return once the process has exited (at once when there is none)."""
        if self.proc is not None:
            await self.proc.wait()

    async def wait_ready(self, probe: Probe, deadline_s: float, interval_s: float = 0.5) -> float:
        """Poll ``probe`` until it answers True; returns the seconds taken. Raises StartFailed when the
        process exits first or the deadline passes, with the end of its log."""
        started = time.monotonic()
        while time.monotonic() - started < deadline_s:
            if not self.alive:
                raise StartFailed(f"exited with code {self.returncode()} while starting", tail(self.log_file))
            if await probe():
                return time.monotonic() - started
            await asyncio.sleep(interval_s)
        raise StartFailed(f"not ready after {deadline_s:.0f} s", tail(self.log_file))

    def signal_group(self, sig: int) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    async def stop(self, grace_s: float | None = None) -> None:
        """SIGTERM to the group, SIGKILL after the grace period; stragglers of the group are killed too."""
        if self.proc is None:
            return
        if self.proc.returncode is None:
            self.signal_group(signal.SIGTERM)
            try:  # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that comes as the
                async with asyncio.timeout(self.stop_grace_s if grace_s is None else grace_s):  # exit does
                    await self.proc.wait()
            except TimeoutError:
                self.signal_group(signal.SIGKILL)
                await self.proc.wait()
        self.signal_group(signal.SIGKILL)  # e.g. vLLM's engine core, left behind by its parent


class ReplicaProcess(ManagedProcess):
    """One vLLM server: its :class:`Launch` is its argv and environment."""

    def __init__(self, launch: Launch, log_file: Path) -> None:
        super().__init__(launch.argv, launch.env, log_file)
        self._launch = launch
        self.spawned: Callable[[], None] = lambda: None
        """Called just before each spawn (:attr:`spawning` set: no pid yet) and as soon as it returns
        (with the pid), nothing else awaited in between: its owner records it in the state file, so a
        process never runs that the file does not name."""
        self.spawning = False
        """True while a spawn is under way (the fork may have happened; its pid is not known yet)."""

    @property
    def launch(self) -> Launch:
        return self._launch

    @launch.setter
    def launch(self, launch: Launch) -> None:
        self._launch, self.argv, self.env = launch, launch.argv, launch.env

    async def start(self) -> None:
        """Tell its owner a spawn is under way (:attr:`spawned`), spawn it, tell the owner its pid."""
        self.spawning = True
        self.spawned()
        try:
            await super().start()
        finally:
            self.spawning = False
        self.spawned()

    async def wait_until_listed(
        self, url: str, served: str, deadline_s: float, client: httpx.AsyncClient
    ) -> float:
        """Ready once /health answers and /v1/models lists the model; returns seconds taken."""
        return await self.wait_ready(lambda: listed(client, url, served), deadline_s)
