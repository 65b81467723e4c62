"""Whether a replacement can start beside the replica it replaces: the host's available memory on a CPU
(``MemAvailable`` of /proc/meminfo), the device's free memory on a GPU."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from workers.host.gpu import MemoryProbe
from workers.replica.launch import ReplicaSpec
from workers.replica.oom import VLLM_DEFAULT_BUDGET, needed_bytes
from workers.replica.weights import weights_for

GIB = 1 << 30
CPU_OVERHEAD_BYTES = 1 * GIB
"""What a vLLM CPU process takes beyond its KV cache and weights (Python, torch, the tokenizer)."""


def parse_meminfo(text: str) -> int | None:
    """``MemAvailable`` in bytes, from the text of /proc/meminfo; None when absent."""
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name == "MemAvailable":
            return int(rest.split()[0]) * 1024
    return None


def host_available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    try:
        return parse_meminfo(meminfo.read_text())
    except OSError:
        return None


def weights_bytes(path: Path | str) -> int:
    """Size of a local weights file or folder; 0 for a hub id or a missing path."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    if not p.is_dir():
        return 0
    total = 0
    for root, _, files in os.walk(p):
        for f in files:
            fp = Path(root) / f
            if not fp.is_symlink() or fp.exists():
                total += fp.stat().st_size
    return total


@dataclass(frozen=True, slots=True)
class Headroom:
    """One reading against one need: both replicas fit, or the old one is stopped first."""

    available_bytes: int | None
    need_bytes: int

    @property
    def fits(self) -> bool:
        """True when the reading covers the need; an unreadable host counts as not fitting."""
        return self.available_bytes is not None and self.available_bytes >= self.need_bytes

    def describe(self) -> str:
        have = "unknown" if self.available_bytes is None else f"{self.available_bytes / GIB:.1f} GiB"
        return f"available {have}, a second replica needs {self.need_bytes / GIB:.1f} GiB"


def cpu_need_bytes(kv_cache_gib: float, weights: int, overhead: int = CPU_OVERHEAD_BYTES) -> int:
    """What a vLLM CPU replica takes from the host: its KV cache, its weights and the overhead."""
    return int(kv_cache_gib * GIB) + weights + overhead


def headroom_probe(
    models_dir: Path | None, gpu_probe: MemoryProbe, gpu_reserve_bytes: int
) -> Callable[[ReplicaSpec], Awaitable[Headroom]]:
    """What the reconciler asks before a replace: can ``spec`` start beside the replica it replaces?"""

    async def probe(spec: ReplicaSpec) -> Headroom:
        if spec.device_kind == "gpu":
            mem = await asyncio.to_thread(gpu_probe, spec.device)
            if mem is None:
                return Headroom(None, 0)
            budget = spec.gpu_memory_utilization or VLLM_DEFAULT_BUDGET
            return Headroom(mem.free_bytes, needed_bytes(budget, mem.total_bytes, gpu_reserve_bytes))
        weights = await asyncio.to_thread(weights_bytes, weights_for(spec.model, models_dir))
        kv = spec.model.budget.kv_cache_gib or 1
        return Headroom(await asyncio.to_thread(host_available_bytes), cpu_need_bytes(kv, weights))

    return probe
