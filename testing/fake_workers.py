"""``llmgw-workers`` exactly as shipped (:func:`workers.cli.serve`), except that each replica is the FAKE
ENGINE (testing/fake_engine.py) instead of vLLM: the fleet's ``engine.extra_args`` become its flags.
Run as ``python -m testing.fake_workers <llmgw-workers arguments>``. With ``LLMGW_FAKE_GPU=1`` each
replica is the FAKE GPU ENGINE (testing/fake_gpu_engine.py) with the budget and the sleep-mode flags vLLM
would get (pair it with the FAKE nvidia-smi, testing/fake_nvidia_smi.py, on PATH)."""

from __future__ import annotations

import os
import sys

from workers.cli import main as workers_main
from workers.replica.launch import Launch, ReplicaSpec, device_env, sleep_mode_args


def fake_launch(spec: ReplicaSpec) -> Launch:
    argv = [sys.executable, "-m", "testing.fake_engine", "--port", str(spec.port), "--model", spec.model.name]
    return Launch([*argv, *spec.model.engine.extra_args])


def fake_gpu_launch(spec: ReplicaSpec) -> Launch:
    """The FAKE GPU ENGINE as vLLM would be launched on a GPU: its budget, load format, sleep mode and
    device environment (``CUDA_VISIBLE_DEVICES``: the FAKE nvidia-smi books its memory there)."""
    sleep_argv, sleep_env = sleep_mode_args(spec)
    argv = [sys.executable, "-m", "testing.fake_gpu_engine", "--port", str(spec.port)]
    argv += ["--model", spec.model.name]
    argv += ["--gpu-memory-utilization", f"{spec.gpu_memory_utilization or 0.9:.3f}", *sleep_argv]
    if spec.model.engine.load_format:
        argv += ["--load-format", spec.model.engine.load_format]
    return Launch([*argv, *spec.model.engine.extra_args], {**device_env(spec), **sleep_env})


def main() -> int:
    """``llmgw-workers``' own main (its start checks included) with the FAKE ENGINE's launch."""
    launch = fake_gpu_launch if os.environ.get("LLMGW_FAKE_GPU") == "1" else fake_launch
    return workers_main(sys.argv[1:], launch)


if __name__ == "__main__":
    raise SystemExit(main())
