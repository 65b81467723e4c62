"""``bench/gpu/multigpu.sh dry``: the multi-GPU recipe on this CPU machine, against FAKE GPU ENGINES and a
FAKE nvidia-smi reporting two devices; every step passes (exit 0) and the log shows each one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from testing.procs import REPO


def test_the_multigpu_recipe_dry_run_passes_every_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = {**os.environ, "PY_DRY": sys.executable, "RUN_DRY": str(run)}
    done = subprocess.run(
        ["bash", str(REPO / "bench/gpu/multigpu.sh"), "dry"],
        env=env, capture_output=True, text=True, timeout=150, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "ready: 3 replicas: gemma-tp2-0, llama-0, qwen2-0" in out
    assert "placement gemma-tp2-0: ok planned gpu:0,1 state gpu:0,1 CUDA_VISIBLE_DEVICES=0,1" in out
    assert "placement llama-0: ok planned gpu:0" in out and "placement qwen2-0: ok planned gpu:1" in out
    assert "placement: 2 GPU(s) reported, 0 replica(s) wrong" in out
    assert "kill: replica llama-0 pid" in out and "load qwen2: 32 requests, 0 errors" in out
    assert "model 'gemma-tp2' replica 0: placement.devices puts it on gpu 1,2" in out
    assert out.rstrip().endswith("ALL STEPS PASSED")
    assert not any((run / f).exists() for f in ("supervisor.pid", "gateway.pid", "redis.pid"))  # all stopped
