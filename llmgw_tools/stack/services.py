"""A long-running child service of the embedded stack (Redis, gateways, nginx, Prometheus, the supervisor),
on the one process lifecycle of :mod:`workers.life.process`, with the probes that tell it is ready."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import httpx

from workers.life.process import ManagedProcess, Probe, StartFailed


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


class Service(ManagedProcess):
    """A named child process with its readiness probe (and, for nginx, the graceful quit signal)."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_file: Path,
        probe: Probe,
        env: dict[str, str] | None = None,
        stop_grace_s: float = 10.0,
        quit_signal: int | None = None,
        death_signal: int = signal.SIGTERM,
    ) -> None:
        super().__init__(argv, env or {}, log_file, stop_grace_s, death_signal)
        self.name, self.probe = name, probe
        self.quit_signal = quit_signal
        """The signal that makes what is left of the service's group finish its work and exit (nginx's
        workers: SIGQUIT, a graceful shutdown) when its main process died; None: they are stopped.
        ``death_signal``: what the service gets when llmgw-stack dies, even by SIGKILL (SIGTERM: it stops
        cleanly; the supervisor gets SIGKILL, so that its vLLM replicas live on to be adopted)."""

    async def wait_until_ready(self, deadline_s: float) -> None:
        try:
            await self.wait_ready(self.probe, deadline_s, interval_s=0.2)
        except StartFailed as exc:
            raise RuntimeError(f"{self.name}: {exc}; see {self.log_file}") from exc
