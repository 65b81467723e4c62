"""A long-running child process of the stack: started in its own process group, with its own log,
ready when its probe answers (polled with a deadline), stopped by SIGTERM then SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from workers.process import spawn_logged

Probe = Callable[[], Awaitable[bool]]


def http_probe(url: str, expect: Callable[[httpx.Response], bool] = lambda r: r.status_code == 200) -> Probe:
    async def probe() -> bool:
        try:
            async with httpx.AsyncClient(timeout=2.0) as client:
                return expect(await client.get(url))
        except (httpx.HTTPError, OSError):
            return False

    return probe


def tcp_probe(host: str, port: int) -> Probe:
    async def probe() -> bool:
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            return False
        writer.close()
        return True

    return probe


@dataclass
class Service:
    name: str
    argv: list[str]
    log_file: Path
    probe: Probe
    env: dict[str, str] = field(default_factory=dict)
    stop_grace_s: float = 10.0
    proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await spawn_logged(self.argv, self.env, self.log_file)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def wait_ready(self, deadline_s: float) -> None:
        started = time.monotonic()
        while time.monotonic() - started < deadline_s:
            if not self.alive:
                raise RuntimeError(f"{self.name} exited while starting; see {self.log_file}")
            if await self.probe():
                return
            await asyncio.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {deadline_s:.0f} s; see {self.log_file}")

    def _signal(self, sig: int) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            self._signal(signal.SIGKILL)
            return
        self._signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), self.stop_grace_s)
        except TimeoutError:
            self._signal(signal.SIGKILL)
            await self.proc.wait()
        self._signal(signal.SIGKILL)
