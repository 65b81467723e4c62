"""FAKE GPU ENGINE: the FAKE ENGINE (testing/fake_engine.py) behind a vLLM-like memory check, for testing the
supervisor's out-of-memory back-off on a machine without a GPU.  It is not vLLM and touches no GPU.

It reads ``--gpu-memory-utilization`` (and drops it), then:
- when the budget is above ``FAKE_GPU_MAX_BUDGET`` (a fraction; unset = no limit), it prints the end of a
  vLLM start-up log that fails the way ``FAKE_GPU_ERROR`` names, and exits 1;
- otherwise it serves as the FAKE ENGINE with the remaining arguments.

``FAKE_GPU_ERROR``: ``cuda`` (default: torch.OutOfMemoryError while loading weights), ``free`` (free
memory below the budget at start-up), ``kv`` (the budget leaves no KV cache), ``other`` (a failure that
is not about memory).  Every start appends its budget to ``FAKE_GPU_STARTS`` (a file), when set.

Sleep mode (testing/fake_sleep.py): ``--enable-sleep-mode`` serves vLLM's sleep endpoints, ``--load-format
dummy`` makes level 2 unwakeable as in vLLM. With ``FAKE_GPU_MEMORY_DIR`` set, the engine writes what it
"holds on the GPU" to a file there named by its port: its budget of ``FAKE_GPU_TOTAL_MIB`` (default
143771, an H200) plus ``FAKE_GPU_OVERHEAD_MIB`` (default 1536) awake, ``FAKE_GPU_ASLEEP_MIB`` (default
1600) asleep; the FAKE nvidia-smi (testing/fake_nvidia_smi.py) reads them.

``--profile h200`` teaches it a measured card (testing/gpu_profile.py, from the lent H200's recorded numbers):
its start-up, each sleep and wake call per level and a first token take their measured seconds, and it
holds the measured MiB awake (its budget's share plus the measured overhead) and asleep at each level.
``--time-scale K`` multiplies those seconds by K, for a long replay run compressed (the gateway's and the
supervisor's own work is not scaled, so it weighs 1/K times more than on the card).
"""

from __future__ import annotations

import argparse
import os
import sys

from testing import fake_engine
from testing.gpu_profile import PROFILES, EngineProfile

# The last lines of real vLLM 0.26 start-up failures (paths shortened), one per FAKE_GPU_ERROR.
ERRORS = {
    "cuda": (
        "ERROR [gpu_model_runner.py:5346] Failed to load model - not enough GPU memory. Try lowering "
        "--gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, or using "
        "--quantization. (original error: CUDA out of memory. Tried to allocate 500.00 MiB. GPU 0 has a "
        "total capacity of 139.81 GiB of which 310.56 MiB is free.)\n"
        "Traceback (most recent call last):\n"
        '  File "vllm/v1/worker/gpu_model_runner.py", line 5336, in load_model\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 500.00 MiB. GPU 0 has a total "
        "capacity of 139.81 GiB of which 310.56 MiB is free.\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    ),
    "free": (
        "Traceback (most recent call last):\n"
        '  File "vllm/v1/worker/utils.py", line 434, in request_memory\n'
        "ValueError: Free memory on device cuda:0 (31.2/139.81 GiB) on startup is less than desired GPU "
        "memory utilization ({budget}, {need:.2f} GiB). Decrease GPU memory utilization or reduce GPU memory "
        "used by other processes.\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    ),
    "kv": (
        "Traceback (most recent call last):\n"
        '  File "vllm/v1/core/kv_cache_utils.py", line 758, in _check_enough_kv_cache_memory\n'
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine.\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    ),
    "other": (
        "Traceback (most recent call last):\n"
        '  File "vllm/model_executor/model_loader/utils.py", line 12, in get_model_architecture\n'
        "ValueError: Model architectures ['FakeForCausalLM'] are not supported for now.\n"
    ),
}


def fail_text(kind: str, budget: float) -> str:
    return ERRORS[kind].replace("{budget}", f"{budget}").replace("{need:.2f}", f"{budget * 139.81:.2f}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--enable-sleep-mode", action="store_true")
    p.add_argument("--load-format", default="auto")
    p.add_argument("--profile", choices=sorted(PROFILES), default=None)
    p.add_argument("--time-scale", type=float, default=1.0)
    known, rest = p.parse_known_args(argv)
    profile = PROFILES[known.profile]().scaled(known.time_scale) if known.profile else None
    budget = known.gpu_memory_utilization
    if starts := os.environ.get("FAKE_GPU_STARTS"):
        with open(starts, "a") as f:
            f.write(f"{budget:.3f}\n")
    limit = os.environ.get("FAKE_GPU_MAX_BUDGET")
    if limit is not None and budget > float(limit) + 1e-9:
        kind = os.environ.get("FAKE_GPU_ERROR", "cuda")
        print(f"INFO fake-gpu-engine: starting with gpu_memory_utilization={budget}", flush=True)
        print(fail_text(kind, budget), file=sys.stderr, flush=True)
        raise SystemExit(1)
    flags = sleep_args(known.enable_sleep_mode, known.load_format, budget, rest, profile)
    taught = profile.engine_args() if profile else []
    fake_engine.main([*flags, *taught, *rest])  # the rest (the fleet's extra_args) wins


def sleep_args(
    enabled: bool, load_format: str, budget: float, rest: list[str], profile: EngineProfile | None = None
) -> list[str]:
    """The FAKE ENGINE's sleep-mode flags, and its memory file when ``FAKE_GPU_MEMORY_DIR`` is set (the
    profile's overhead and asleep MiB when given, else the environment's)."""
    out = ["--enable-sleep-mode"] if enabled else []
    if load_format == "dummy":
        out.append("--dummy-weights")
    folder = os.environ.get("FAKE_GPU_MEMORY_DIR")
    if folder:
        port = rest[rest.index("--port") + 1] if "--port" in rest else "8199"
        total = int(os.environ.get("FAKE_GPU_TOTAL_MIB", "143771"))
        overhead = profile.overhead_mib if profile else int(os.environ.get("FAKE_GPU_OVERHEAD_MIB", "1536"))
        awake = round(budget * total) + overhead
        asleep = profile.asleep1_mib if profile else int(os.environ.get("FAKE_GPU_ASLEEP_MIB", "1600"))
        out += ["--memory-file", os.path.join(folder, port), "--awake-mib", str(awake)]
        out += ["--asleep-mib", str(asleep)]
    return out


if __name__ == "__main__":
    main()
