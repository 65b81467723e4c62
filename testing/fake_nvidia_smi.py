"""FAKE nvidia-smi: answers the three queries the supervisor makes (workers/host/gpu.py) for
``FAKE_GPU_COUNT`` fake GPUs (default 1), from the memory files the FAKE GPU ENGINE writes
(testing/fake_gpu_engine.py, ``FAKE_GPU_MEMORY_DIR``: one file per engine, ``<pid> <MiB> [<devices>]``,
the devices its ``CUDA_VISIBLE_DEVICES`` named, default 0; an engine on several devices holds its MiB on
each, as a tensor-parallel vLLM does). Card used = their sum + ``FAKE_GPU_BASELINE_MIB`` (default 0); each
card's total ``FAKE_GPU_TOTAL_MIB`` (default 143771). A file whose process is gone counts nothing.
Installed on PATH as ``nvidia-smi`` by a wrapper script for dry runs (bench/gpu/sleep.sh dry,
bench/gpu/multigpu.sh dry)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def uuid(device: int) -> str:
    return f"GPU-fake-{device:04d}"


def held() -> dict[int, tuple[int, tuple[int, ...]]]:
    """pid -> (MiB, devices) of every live fake engine."""
    out: dict[int, tuple[int, tuple[int, ...]]] = {}
    folder = os.environ.get("FAKE_GPU_MEMORY_DIR", "")
    for f in Path(folder).iterdir() if folder else []:
        try:
            fields = f.read_text().split()
            pid, mib = int(fields[0]), int(fields[1])
            devices = tuple(int(d) for d in fields[2].split(",")) if len(fields) > 2 else (0,)
        except (OSError, ValueError, IndexError):
            continue
        if Path(f"/proc/{pid}").exists():
            out[pid] = (mib, devices)
    return out


def card_line(device: int, used: int, total: int, fields: list[str]) -> str:
    values = {
        "index": str(device), "uuid": uuid(device), "memory.used": str(used),
        "memory.free": str(total - used), "memory.total": str(total), "name": "FAKE H200",
        "driver_version": "0",
    }  # fmt: skip
    return ", ".join(values.get(k, "0") for k in fields)


def install(bin_dir: Path) -> Path:
    """Write ``bin_dir/nvidia-smi``: a wrapper that runs this module with this interpreter and this repo."""
    repo = Path(__file__).resolve().parent.parent
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nPYTHONPATH={repo} exec {sys.executable} -m testing.fake_nvidia_smi "$@"\n')
    smi.chmod(0o755)
    return smi


def fake_gpu_env(tmp: Path, count: int = 1) -> dict[str, str]:
    """Install the wrapper under ``tmp/bin`` and make ``tmp/gpu-mem``: the environment (PATH first) under
    which nvidia-smi is this FAKE with ``count`` GPUs booking the FAKE GPU ENGINES' memory files."""
    (tmp / "bin").mkdir(exist_ok=True)
    (tmp / "gpu-mem").mkdir(exist_ok=True)
    install(tmp / "bin")
    path = f"{tmp / 'bin'}:{Path(sys.executable).parent}:/usr/bin:/bin"
    return {"PATH": path, "FAKE_GPU_MEMORY_DIR": str(tmp / "gpu-mem"), "FAKE_GPU_COUNT": str(count)}


def main(argv: list[str]) -> int:
    query = next((a for a in argv if a.startswith("--query-")), "")
    total = int(os.environ.get("FAKE_GPU_TOTAL_MIB", "143771"))
    count = int(os.environ.get("FAKE_GPU_COUNT", "1"))
    procs = held()
    if not query.startswith(("--query-compute-apps=", "--query-gpu=")):
        print("FAKE nvidia-smi: unsupported query", argv, file=sys.stderr)
        return 2
    fields = query.split("=", 1)[1].split(",")
    if query.startswith("--query-compute-apps="):
        for pid, (mib, devices) in procs.items():
            for device in devices:
                app = {"pid": str(pid), "gpu_uuid": uuid(device), "used_memory": str(mib)}
                print(", ".join(app.get(k, "0") for k in fields))
        return 0
    baseline = int(os.environ.get("FAKE_GPU_BASELINE_MIB", "0"))
    for device in range(count):
        used = baseline + sum(mib for mib, devices in procs.values() if device in devices)
        print(card_line(device, used, total, fields))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
