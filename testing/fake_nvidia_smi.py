"""FAKE nvidia-smi: answers the three queries the supervisor makes (workers/host/gpu.py) for one fake GPU,
from the memory files the FAKE GPU ENGINE writes (testing/fake_gpu_engine.py, ``FAKE_GPU_MEMORY_DIR``: one
file per engine, ``<pid> <MiB>``). Card used = their sum + ``FAKE_GPU_BASELINE_MIB`` (default 0); total
``FAKE_GPU_TOTAL_MIB`` (default 143771). A file whose process is gone counts nothing. Installed on PATH as
``nvidia-smi`` by a wrapper script for dry runs (bench/gpu/sleep.sh dry)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

UUID = "GPU-fake-0000"


def held() -> dict[int, int]:
    """pid -> MiB of every live fake engine."""
    out: dict[int, int] = {}
    folder = os.environ.get("FAKE_GPU_MEMORY_DIR", "")
    for f in Path(folder).iterdir() if folder else []:
        try:
            pid, mib = (int(x) for x in f.read_text().split())
        except (OSError, ValueError):
            continue
        if Path(f"/proc/{pid}").exists():
            out[pid] = mib
    return out


def main(argv: list[str]) -> int:
    query = next((a for a in argv if a.startswith("--query-")), "")
    total = int(os.environ.get("FAKE_GPU_TOTAL_MIB", "143771"))
    procs = held()
    if query.startswith("--query-compute-apps="):
        for pid, mib in procs.items():
            app = {"pid": str(pid), "gpu_uuid": UUID, "used_memory": str(mib)}
            print(", ".join(app.get(k, "0") for k in query.split("=", 1)[1].split(",")))
    elif query == "--query-gpu=index,uuid":
        print(f"0, {UUID}")
    elif query.startswith("--query-gpu="):
        used = sum(procs.values()) + int(os.environ.get("FAKE_GPU_BASELINE_MIB", "0"))
        fields = {
            "index": "0", "memory.used": str(used), "memory.free": str(total - used),
            "memory.total": str(total), "name": "FAKE H200", "driver_version": "0",
        }  # fmt: skip
        print(", ".join(fields.get(k, "0") for k in query.split("=", 1)[1].split(",")))
    else:
        print("FAKE nvidia-smi: unsupported query", argv, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
