"""Measured GPU memory against the planner's prediction.

* per process: ``nvidia-smi --query-compute-apps`` (through workers.host.gpu), each pid traced up its parents
  to the vLLM server whose ``--served-model-name`` names the model;
* per replica, a second way: the supervisor logs the device's used memory before each start and after
  each replica is ready (``gpu:0 after ready: used_mib=...``); the difference is what that start took;
* in total: ``nvidia-smi --query-gpu`` used, against the baseline read before anything started plus the
  planner's per-process ``budget x total + reserve``;
* vLLM's own log: weights ("Model loading took"), KV cache GiB and tokens, against the planner's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from workers.host.gpu import MIB, gpu_memory, process_memory

GIB = 1 << 30
_AFTER_READY = re.compile(r"replica=(\S+)-0 gpu:\d+ after ready: used_mib=(\d+)")
_GATE = re.compile(r"replica=(\S+)-0 gpu:\d+ has ([\d.]+) GiB free of ([\d.]+) GiB")
_VLLM = {
    "weights_gib": re.compile(r"Model loading took ([\d.]+) GiB"),
    "kv_gib": re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    "kv_tokens": re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
}


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _served_name(pid: int) -> str | None:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    args = [a.decode(errors="replace") for a in argv]
    if "--served-model-name" in args:
        i = args.index("--served-model-name")
        return args[i + 1] if i + 1 < len(args) else None
    return None


def model_of(pid: int, depth: int = 6) -> str | None:
    """The model a GPU process serves: its own or an ancestor's --served-model-name."""
    p: int | None = pid
    for _ in range(depth):
        if p is None or p <= 1:
            return None
        name = _served_name(p)
        if name:
            return name
        p = _parent(p)
    return None


def snapshot() -> dict[str, Any]:
    """Device and per-process memory now (MiB), with each process's model."""
    dev = gpu_memory()[0]
    procs = [
        {"pid": pid, "model": model_of(pid), "used_mib": used >> 20}
        for pid, (_idx, used) in sorted(process_memory().items())
    ]
    return {
        "used_mib": dev.used_bytes // MIB,
        "free_mib": dev.free_bytes // MIB,
        "total_mib": dev.total_bytes // MIB,
        "processes": procs,
    }


def supervisor_deltas(log_text: str, baseline_used_mib: int) -> dict[str, int]:
    """Model -> MiB its start took, from the supervisor's 'after ready' lines (one device, in order)."""
    out, before = {}, baseline_used_mib
    for m in _AFTER_READY.finditer(log_text):
        used = int(m.group(2))
        out[m.group(1)] = used - before
        before = used
    return out


def vllm_numbers(log_text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, rx in _VLLM.items():
        found = rx.findall(log_text)
        if found:
            out[key] = float(found[-1].replace(",", ""))
    return out


def pct(measured: float, predicted: float) -> float:
    return round(100.0 * (measured - predicted) / predicted, 2)


def compare(
    snap: dict[str, Any],
    plan: dict[str, Any],
    baseline_used_mib: int,
    deltas: dict[str, int],
    logs: dict[str, str],
) -> dict[str, Any]:
    """Per model and in total: measured MiB, predicted MiB, error in %."""
    per_model: dict[str, Any] = {}
    for name, r in plan["replicas"].items():
        measured = sum(p["used_mib"] for p in snap["processes"] if p["model"] == name)
        predicted = r["used_bytes"] / MIB
        vllm = vllm_numbers(logs.get(name, ""))
        per_model[name] = {
            "budget": r["gpu_memory_utilization"],
            "predicted_mib": round(predicted),
            "measured_mib": measured,
            "error_pct": pct(measured, predicted) if measured else None,
            "start_delta_mib": deltas.get(name),
            "start_delta_error_pct": pct(deltas[name], predicted) if name in deltas else None,
            "beyond_budget_mib": measured - round(r["budget_bytes"] / MIB) if measured else None,
            "weights_gib": {"planned": round(r["weight_bytes"] / GIB, 2), "vllm": vllm.get("weights_gib")},
            "kv_gib": {"planned": round(r["kv_bytes"] / GIB, 2), "vllm": vllm.get("kv_gib")},
            "kv_tokens": {"planned": r["kv_tokens"], "vllm": vllm.get("kv_tokens")},
        }
    predicted_total = baseline_used_mib + sum(r["used_bytes"] for r in plan["replicas"].values()) / MIB
    return {
        "baseline_used_mib": baseline_used_mib,
        "device": {
            "total_mib": snap["total_mib"],
            "used_mib": snap["used_mib"],
            "predicted_used_mib": round(predicted_total),
            "error_pct": pct(snap["used_mib"], predicted_total),
            "used_fraction": round(snap["used_mib"] / snap["total_mib"], 4),
            "planned_fraction": round(predicted_total / snap["total_mib"], 4),
        },
        "models": per_model,
    }
