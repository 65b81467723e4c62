"""One vLLM OS process: start it in its own process group with its own log, probe it, stop it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from pathlib import Path

import httpx

from contract.vllm_probe import listed
from workers.launch import Launch

log = logging.getLogger("llmgw.workers")


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


async def spawn_logged(argv: list[str], env: dict[str, str], log_file: Path) -> asyncio.subprocess.Process:
    """A child in its own process group (so that it can be stopped whole), its output appended to a log."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out, env={**os.environ, **env},
            start_new_session=True,
        )  # fmt: skip


def redis_server_argv(binary: str, port: int, data_dir: Path, host: str = "127.0.0.1") -> list[str]:
    """A throw-away redis-server: loopback, no persistence (registry and leases rebuild from heartbeats)."""
    return [
        binary,
        "--port",
        str(port),
        "--bind",
        host,
        "--dir",
        str(data_dir),
        "--save",
        "",
        "--appendonly",
        "no",
    ]


class ReplicaProcess:
    def __init__(self, launch: Launch, log_file: Path) -> None:
        self.launch = launch
        self.log_file = log_file
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        self.proc = await spawn_logged(self.launch.argv, self.launch.env, self.log_file)

    async def wait_ready(self, url: str, served: str, deadline_s: float, client: httpx.AsyncClient) -> float:
        """Poll /health and /v1/models until the model is listed; returns seconds taken."""
        started = time.monotonic()
        while time.monotonic() - started < deadline_s:
            if not self.alive:
                raise StartFailed(f"exited with code {self.returncode()} while starting", tail(self.log_file))
            if await listed(client, url, served):
                return time.monotonic() - started
            await asyncio.sleep(0.5)
        raise StartFailed(f"not ready after {deadline_s:.0f} s", tail(self.log_file))

    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc else None

    def signal_group(self, sig: int) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    async def stop(self, grace_s: float = 10.0) -> None:
        if self.proc is None:
            return
        self.signal_group(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), grace_s)
        except TimeoutError:
            self.signal_group(signal.SIGKILL)
            await self.proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers of the group (engine core)
