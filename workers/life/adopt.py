"""Replicas that outlive their supervisor: the state file that names them, the checks that tell a replica
from a stranger on a reused pid, and the adoption itself.

The supervisor writes every replica with a live process to the state file (pid, process group, port, id,
instance, the model it was started with, ``starting`` or ``running``): before its process is spawned
(``spawning``, no pid yet), as soon as the spawn returns (with the pid: :attr:`ReplicaProcess.spawned`),
and again on every change.  A supervisor started again reads it and, for each entry:

* one written before its spawn: the processes whose command line starts it (its port, its model), each
  leading its own group, are stopped (their whole groups);
* a dead leader whose process group still has live members (vLLM's engine core, holding the GPU memory,
  outlives its API server) is stopped: the whole group, waited for until a deadline; a group id is not
  given to another process while any member lives, so the members are the replica's own;
* the process's command line (/proc/<pid>/cmdline) must carry ``--port <port>`` and the model's name,
  else the pid now belongs to someone else: the entry is dropped and the process left alone;
* it must answer /health and list its model on /v1/models, else it is stopped (its whole group): so is a
  replica still starting when its supervisor died;
* then it is adopted: the same id, port and instance, published READY, watched like any replica.

Nothing is published before both checks pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from llmgw_contract.fleet import Model
from llmgw_contract.vllm_probe import listed
from workers.life.process import ReplicaProcess
from workers.replica.launch import Launch, ReplicaSpec

log = logging.getLogger("llmgw.adopt")


@dataclass(frozen=True, slots=True)
class Entry:
    """One replica in the state file."""

    id: str
    index: int
    slot: int
    port: int
    host: str
    devices: list[int]
    device_kind: str
    budget: float | None
    pid: int
    instance: str
    model: str
    """The model the replica was started with, as JSON (its configuration, not only its name)."""
    state: str = "running"
    """``spawning`` (written before the fork: ``pid`` 0, not known yet), ``starting`` while it starts or
    wakes (spawned, not yet ready), else ``running``."""
    pgid: int | None = None
    """Its process group (its own session: the leader's pid); None in files written before it was kept."""

    @property
    def group(self) -> int:
        return self.pid if self.pgid is None else self.pgid

    def spec(self) -> ReplicaSpec:
        model = Model.model_validate_json(self.model)
        return ReplicaSpec(
            model, self.index, self.port, tuple(self.devices), self.host, self.device_kind, self.budget
        )


def entry_for(spec: ReplicaSpec, slot: int, pid: int, instance: str, state: str = "running") -> Entry:
    """The entry of a replica whose process ``pid`` leads its own process group (:func:`spawn_logged`)."""
    return Entry(
        spec.id, spec.index, slot, spec.port, spec.host, list(spec.devices), spec.device_kind,
        spec.gpu_memory_utilization, pid, instance, spec.model.model_dump_json(), state, pid,
    )  # fmt: skip


class StateFile:
    """The supervisor's list of running replicas, rewritten atomically on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def save(self, entries: list[Entry]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(e) for e in entries], indent=1))
        os.replace(tmp, self.path)

    def load(self) -> list[Entry]:
        """The entries, or none when the file is missing or unreadable (logged)."""
        try:
            raw = json.loads(self.path.read_text())
            return [Entry(**item) for item in raw]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, TypeError) as exc:
            log.warning("state file %s ignored: %s", self.path, exc)
            return []


def cmdline(pid: int) -> list[str] | None:
    """The process's argv from /proc, or None when there is no such (live) process."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a] or None


def pid_alive(pid: int) -> bool:
    """True for a live process (a zombie, reaped by nobody yet, counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def is_replica(argv: list[str], entry: Entry) -> bool:
    """Does this command line start the replica the entry names (its port and its model)?"""
    ports = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--port"}
    ports |= {a.split("=", 1)[1] for a in argv if a.startswith("--port=")}
    name = Model.model_validate_json(entry.model).name
    return str(entry.port) in ports and name in argv


class AdoptedProcess(ReplicaProcess):
    """A replica process this supervisor did not start: known by pid, polled instead of awaited.
    A restart after it dies starts a child as usual (:meth:`start`)."""

    def __init__(self, launch: Launch, log_file: Path, pid: int, poll_s: float = 0.5) -> None:
        super().__init__(launch, log_file)
        self.adopted_pid: int | None = pid
        self.poll_s = poll_s

    @property
    def pid(self) -> int | None:
        return self.adopted_pid if self.adopted_pid is not None else super().pid

    @property
    def alive(self) -> bool:
        if self.adopted_pid is not None:
            return pid_alive(self.adopted_pid)
        return super().alive

    def returncode(self) -> int | None:
        if self.adopted_pid is not None:
            return None  # not our child: its status is not ours to read
        return super().returncode()

    async def start(self) -> None:
        self.adopted_pid = None
        await super().start()

    async def wait_exit(self) -> None:
        while self.alive:
            if self.adopted_pid is None and self.proc is not None:
                await self.proc.wait()
                return
            await asyncio.sleep(self.poll_s)

    async def stop(self, grace_s: float | None = None) -> None:
        pid = self.adopted_pid
        if pid is None:
            await super().stop(grace_s)
            return
        kill_group(pid, signal.SIGTERM)
        grace = self.stop_grace_s if grace_s is None else grace_s
        for _ in range(max(1, int(grace / 0.1))):
            if not group_alive(pid):
                break
            await asyncio.sleep(0.1)
        kill_group(pid, signal.SIGKILL)
        await wait_group_gone(pid, grace)


async def wait_group_gone(pgid: int, deadline_s: float, poll_s: float = 0.05) -> bool:
    """Poll until no member of the group lives (zombies aside), at most ``deadline_s``; False (logged)
    when some still live then (in uninterruptible sleep, or not ours to signal)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while group_alive(pgid):
        if loop.time() >= end:
            log.error("process group %d still has live members %.0f s after SIGKILL", pgid, deadline_s)
            return False
        await asyncio.sleep(poll_s)
    return True


def kill_group(pid: int, sig: int) -> None:
    """Signal the replica's process group, whose id is its leader's pid (every replica and adopted
    process is started in a session of its own), whether the leader is alive or dead: vLLM's engine core
    may outlive it. A group id is not reused while any member lives."""
    if pid <= 0:  # 0 or -1 would signal this supervisor's own group, or every process it may signal
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if pid_alive(pid) and _pgid(pid) != pid:  # not a group leader: the process alone
            os.kill(pid, sig)
            return
        os.killpg(pid, sig)


def group_alive(pgid: int) -> bool:
    """True while any process of the group lives (zombies aside); False for no group (``pgid`` <= 0)."""
    if pgid <= 0:
        return False
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return any(pid_alive(int(p)) and _pgid(int(p)) == pgid for p in os.listdir("/proc") if p.isdigit())


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def spawned_for(entry: Entry) -> list[int]:
    """The group leaders whose command line starts the replica the entry names (its port and model): a
    spawn under way when the supervisor died, before the entry got its pid."""
    found = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        argv = cmdline(pid)
        if argv is not None and pid_alive(pid) and _pgid(pid) == pid and is_replica(argv, entry):
            found.append(pid)
    return found


async def stop_spawned(e: Entry) -> None:
    """Stop the whole group of each process found for an entry written before its spawn."""
    found = spawned_for(e)
    for pid in found:
        log.warning("replica=%s pid=%d port=%d was being spawned when its supervisor died: stopping it "
                    "(its whole group)", e.id, pid, e.port)  # fmt: skip
        await AdoptedProcess(Launch([]), Path(os.devnull), pid).stop(5.0)
    if not found:
        log.info("replica=%s port=%d was to be spawned: no such process, forgotten", e.id, e.port)


async def verify(entry: Entry, client: httpx.AsyncClient) -> str:
    """``adopt``, ``stop`` (ours but not serving, or a dead leader's group that lives on) or ``forget``
    (not ours any more, or gone with its whole group)."""
    argv = cmdline(entry.pid)
    if argv is None or not pid_alive(entry.pid):
        return "stop" if group_alive(entry.group) else "forget"
    if not is_replica(argv, entry):
        return "forget"
    url = f"http://{entry.host}:{entry.port}"
    if await listed(client, url, Model.model_validate_json(entry.model).name):
        return "adopt"
    return "stop"


async def check_entries(entries: list[Entry], client: httpx.AsyncClient) -> list[Entry]:
    """The entries whose processes can be adopted; the others are stopped or forgotten, each logged."""
    keep = []
    for e in entries:
        if e.state == "spawning" or e.pid <= 0:
            await stop_spawned(e)
            continue
        verdict = await verify(e, client)
        if verdict == "adopt":
            log.info("adopting replica=%s pid=%d port=%d instance=%s", e.id, e.pid, e.port, e.instance)
            keep.append(e)
        elif verdict == "stop":
            why = (
                "its leader is dead, its process group lives on" if not pid_alive(e.pid)
                else "it was still starting" if e.state == "starting" else "it does not answer"
            )  # fmt: skip
            log.warning("replica=%s pid=%d pgid=%d port=%d %s: stopping it (its whole group)",
                        e.id, e.pid, e.group, e.port, why)  # fmt: skip
            await AdoptedProcess(Launch([]), Path(os.devnull), e.group).stop(5.0)
        else:
            log.info("replica=%s pid=%d is gone or is another process now: forgotten", e.id, e.pid)
    return keep
