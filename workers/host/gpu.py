"""Device memory, as ``nvidia-smi`` reports it: per GPU (used, free, total) and per process.

The parsers are pure functions of nvidia-smi's CSV text (``--format=csv,noheader,nounits``, MiB), so they
are tested on captured output; :func:`nvidia_smi_probe` runs the command.  The supervisor takes any
:data:`MemoryProbe` (tests inject a fake one).

nvidia-smi numbers GPUs in PCI bus order; CUDA does too when ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (on a
machine whose GPUs are all of one model the two orders agree anyway).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30
GPU_QUERY = "index,memory.used,memory.free,memory.total"
APPS_QUERY = "pid,gpu_uuid,used_memory"
UUID_QUERY = "index,uuid"


class ProbeError(RuntimeError):
    """nvidia-smi is missing, failed, or printed something this module cannot read."""


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """One GPU's memory in bytes, read at one moment."""

    index: int
    used_bytes: int
    free_bytes: int
    total_bytes: int

    def covers(self, needed_bytes: int) -> bool:
        return self.free_bytes >= needed_bytes

    def describe(self) -> str:
        return f"{gib(self.free_bytes)} GiB free of {gib(self.total_bytes)} GiB"


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """GPU memory one process holds (nvidia-smi --query-compute-apps)."""

    pid: int
    gpu_uuid: str
    used_bytes: int


MemoryProbe = Callable[[int], DeviceMemory | None]
"""Device index -> its memory now, or None when it cannot be read (the start gate is then skipped)."""


def gib(n: int | float) -> str:
    return f"{n / GIB:.1f}"


def _fields(line: str) -> list[str]:
    return [f.strip() for f in line.split(",")]


def _mib(value: str, line: str) -> int:
    try:
        return int(float(value) * MIB)
    except ValueError as exc:
        raise ProbeError(f"not a number of MiB: {value!r} in nvidia-smi line {line!r}") from exc


def parse_gpu_memory(text: str) -> list[DeviceMemory]:
    """Parse ``--query-gpu=[index,]memory.used,memory.free,memory.total --format=csv,noheader,nounits``.

    Lines of three fields are numbered in order; lines of four start with the index.
    """
    out: list[DeviceMemory] = []
    for line in (ln for ln in text.splitlines() if ln.strip()):
        f = _fields(line)
        if len(f) == 3:
            f = [str(len(out)), *f]
        if len(f) != 4 or not f[0].isdigit():
            raise ProbeError(f"cannot read nvidia-smi line {line!r} (want [index,] used, free, total)")
        used, free, total = (_mib(v, line) for v in f[1:])
        out.append(DeviceMemory(int(f[0]), used, free, total))
    return out


def parse_compute_apps(text: str) -> list[ProcessMemory]:
    """Parse ``--query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits``."""
    out = []
    for line in (ln for ln in text.splitlines() if ln.strip()):
        if line.strip().lower().startswith("no running"):
            continue
        f = _fields(line)
        if len(f) != 3 or not f[0].isdigit():
            raise ProbeError(f"cannot read nvidia-smi line {line!r} (want pid, gpu_uuid, used_memory)")
        used = 0 if f[2] in ("[N/A]", "N/A") else _mib(f[2], line)
        out.append(ProcessMemory(int(f[0]), f[1], used))
    return out


def parse_uuids(text: str) -> dict[str, int]:
    """Parse ``--query-gpu=index,uuid``: GPU uuid -> index."""
    out = {}
    for line in (ln for ln in text.splitlines() if ln.strip()):
        f = _fields(line)
        if len(f) != 2 or not f[0].isdigit():
            raise ProbeError(f"cannot read nvidia-smi line {line!r} (want index, uuid)")
        out[f[1]] = int(f[0])
    return out


def run_nvidia_smi(args: Sequence[str], timeout_s: float = 10.0) -> str:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise ProbeError("nvidia-smi is not on PATH")
    try:
        done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProbeError(f"nvidia-smi failed: {exc}") from exc
    if done.returncode != 0:
        raise ProbeError(f"nvidia-smi exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def query(fields: str, what: str = "gpu") -> str:
    return run_nvidia_smi([f"--query-{what}={fields}", "--format=csv,noheader,nounits"])


def gpu_memory() -> list[DeviceMemory]:
    return parse_gpu_memory(query(GPU_QUERY))


def process_memory() -> dict[int, tuple[int, int]]:
    """pid -> (GPU index, bytes) for every process holding GPU memory."""
    uuids = parse_uuids(query(UUID_QUERY))
    return {
        p.pid: (uuids.get(p.gpu_uuid, -1), p.used_bytes)
        for p in parse_compute_apps(query(APPS_QUERY, "compute-apps"))
    }


def nvidia_smi_probe(device: int) -> DeviceMemory | None:
    """The :data:`MemoryProbe` the supervisor uses on GPUs; None when nvidia-smi cannot answer."""
    try:
        devices = gpu_memory()
    except ProbeError:
        return None
    return next((d for d in devices if d.index == device), None)


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one moment: the card, and the bytes each process holds on it (pid -> bytes)."""

    card: DeviceMemory
    processes: dict[int, int]

    def held_by(self, pids: set[int]) -> int:
        """What the processes ``pids`` hold on this GPU (a replica: its server and engine core)."""
        return sum(b for pid, b in self.processes.items() if pid in pids)


GpuReader = Callable[[int], GpuReading | None]
"""Device index -> its card and per-process memory now, or None when nvidia-smi cannot answer."""


def nvidia_smi_reading(device: int) -> GpuReading | None:
    """The :data:`GpuReader` of the on-demand ledger: two nvidia-smi queries; None when it cannot answer."""
    try:
        card = next((d for d in gpu_memory() if d.index == device), None)
        procs = process_memory()
    except ProbeError:
        return None
    if card is None:
        return None
    return GpuReading(card, {pid: b for pid, (idx, b) in procs.items() if idx == device})
