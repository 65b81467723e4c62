"""``llmgw-workers`` exactly as shipped (:func:`workers.cli.serve`), except that each replica is the FAKE
ENGINE (testing/fake_engine.py) instead of vLLM: the fleet's ``engine.extra_args`` become its flags.
Run as ``python -m testing.fake_workers <llmgw-workers arguments>``. With ``LLMGW_FAKE_GPU=1`` each
replica is the FAKE GPU ENGINE (testing/fake_gpu_engine.py) with the budget and the sleep-mode flags vLLM
would get (pair it with the FAKE nvidia-smi, testing/fake_nvidia_smi.py, on PATH)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from workers.cli import LOG_FORMAT, parse_args, serve
from workers.replica.launch import Launch, ReplicaSpec, sleep_mode_args


def fake_launch(spec: ReplicaSpec) -> Launch:
    argv = [sys.executable, "-m", "testing.fake_engine", "--port", str(spec.port), "--model", spec.model.name]
    return Launch([*argv, *spec.model.engine.extra_args])


def fake_gpu_launch(spec: ReplicaSpec) -> Launch:
    """The FAKE GPU ENGINE as vLLM would be launched on a GPU: its budget, load format and sleep mode."""
    sleep_argv, sleep_env = sleep_mode_args(spec)
    argv = [sys.executable, "-m", "testing.fake_gpu_engine", "--port", str(spec.port)]
    argv += ["--model", spec.model.name]
    argv += ["--gpu-memory-utilization", f"{spec.gpu_memory_utilization or 0.9:.3f}", *sleep_argv]
    if spec.model.engine.load_format:
        argv += ["--load-format", spec.model.engine.load_format]
    return Launch([*argv, *spec.model.engine.extra_args], sleep_env)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stdout)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    launch = fake_gpu_launch if os.environ.get("LLMGW_FAKE_GPU") == "1" else fake_launch
    return asyncio.run(serve(parse_args(sys.argv[1:]), launch))


if __name__ == "__main__":
    raise SystemExit(main())
