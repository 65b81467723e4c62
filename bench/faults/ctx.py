"""What the faults of bench/faults share: the running stack and the load (:class:`Ctx`), what a fault
notes for the checkers (:class:`Strike`), and the ways to strike: signal a replica or a service, freeze a
group of processes, send a request with a given prompt, turn a FAKE ENGINE's run-time fault on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.faults.checks import Exit, Outcome
from bench.faults.workload import CHAT, Load, Request, send, with_prompt
from llmgw_tools.stack.redis_topology import Node
from llmgw_tools.stack.stack import Stack
from testing.poll import until
from workers.life.adopt import StateFile, pid_alive

PAUSE_S = 4.0  # a SIGSTOP lasts this long (past the gateways' 5 s chunk timeout only with the load's own)
DOWN_S = 2.0  # a killed Redis or gateway stays down this long


@dataclass
class Strike:
    """What a fault did, for the checkers."""

    note: str = ""
    cuts: dict[Path, int] = field(default_factory=dict)
    exits: list[Exit] = field(default_factory=list)
    gateway_killed: bool = False
    outage_end: float | None = None
    """When a Redis outage ended (monotonic): the registry must be whole within 10 s of it."""
    outcomes: list[Outcome] = field(default_factory=list)
    stalled: list[str] = field(default_factory=list)
    """Ids of slow readers' streams: each must be ended by the gateway, counted as stalled, and its
    generation aborted at its engine (checks.not_dropped)."""
    not_injected: str = ""


@dataclass
class Ctx:
    stack: Stack
    load: Load
    strike: Strike = field(default_factory=Strike)

    @property
    def state_file(self) -> Path:
        return self.stack.config.run_dir / "workers-state.json"

    def replica_pids(self, model: str = CHAT) -> list[tuple[str, int]]:
        return sorted(
            (e.id, e.pid) for e in StateFile(self.state_file).load() if e.spec().model.name == model
        )

    def replica_log(self, replica_id: str) -> Path:
        return self.stack.logs / f"{replica_id}.log"

    async def dead(self, pid: int, deadline_s: float = 10.0) -> None:
        await until(lambda: not pid_alive(pid), deadline_s, f"pid {pid} dead", interval_s=0.05)

    async def kill_replica(self, replica_id: str, pid: int, sig: int = signal.SIGKILL) -> bool:
        """Signal the replica's group; when it dies, its log is cut there (its runs ended with it)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        with contextlib.suppress(AssertionError):
            await self.dead(pid, 3.0 if sig != signal.SIGKILL else 10.0)
        if pid_alive(pid):
            return False
        path = self.replica_log(replica_id)
        self.strike.cuts[path] = path.stat().st_size
        return True

    async def service_signal(self, name: str, sig: int, *, restart_after_s: float | None = None) -> str:
        """Signal a stack service's group; if it died, note its exit, start it again (same command line,
        same id) after ``restart_after_s`` (or at once)."""
        svc = self.stack.service(name)
        svc.signal_group(sig)
        with contextlib.suppress(AssertionError):
            await until(lambda: not svc.alive, 3.0 if sig != signal.SIGKILL else 10.0, name, interval_s=0.05)
        if svc.alive:
            return f"{name} lives on after {signal.Signals(sig).name}"
        code = svc.returncode()
        self.strike.exits.append(Exit(name, code if code is not None else 0, asked=sig == signal.SIGKILL))
        await asyncio.sleep(restart_after_s or 0.0)
        await self.stack.restart(name)
        return f"{name} exited ({code}) on {signal.Signals(sig).name}; started again under the same id"

    def redis_nodes(self) -> list[Node]:
        topo = self.stack.topology
        return [n for n in topo.nodes if n.role != "sentinel"] if topo is not None else []


async def freeze(pids: list[int], pause_s: float) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(pause_s)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGCONT)


async def prompt_request(c: Ctx, prompt: str, req: Request) -> Outcome:
    """One request of ours holding ``prompt`` (counted with the load's ids), through nginx."""
    tenant = c.load.tenants[0]
    async with httpx.AsyncClient(timeout=c.load.timeout_s) as client:
        out = await send(client, c.load.url, with_prompt(req, prompt), c.load.next_id(), tenant)
    c.strike.outcomes.append(out)
    return out


async def set_knob(urls: list[str], path: str) -> None:
    """A FAKE ENGINE's run-time fault (``/fault/...?ms=N``) on each of ``urls``."""
    async with httpx.AsyncClient(timeout=5.0) as client:
        for url in urls:
            with contextlib.suppress(httpx.HTTPError):
                await client.get(url + path)


def replica_urls(c: Ctx, model: str = CHAT) -> list[str]:
    entries = StateFile(c.state_file).load()
    return sorted(f"http://{e.host}:{e.port}" for e in entries if e.spec().model.name == model)
