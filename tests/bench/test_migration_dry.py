"""``bench/gpu/migration.sh dry``: the H200 migration recipe on this CPU machine, against FAKE GPU ENGINES
and a FAKE nvidia-smi, with the fleet filtered to SmolLM2 and served twice (``MODES="invariant default"``):
each mode's pass kills a replica found on the fleet file's ports, every stream continues with an exact seam,
and the driver stops what it started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from testing.procs import REPO


def test_the_migration_recipe_dry_run_serves_each_mode_and_kills_on_the_fleets_ports(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = {
        **os.environ, "PY_DRY": sys.executable, "RUN_DRY": str(run), "PASSES": "smollm2",
        "MODES": "invariant default", "TOKENS": "120",  # 2.4 s a stream: the kill lands mid-stream under load
    }  # fmt: skip
    done = subprocess.run(
        ["bash", str(REPO / "bench/gpu/migration.sh"), "dry"],
        env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "FAILED" not in out, out
    assert out.count("replica on port 18100 killed (-9)") == 2, out  # a SmolLM2-only fleet starts on 18100
    for mode, invariant in (("invariant", True), ("default", False)):
        result = json.loads((run / f"results/migration-smollm2-{mode}.json").read_text())
        assert (result["errors"], result["seam_ok"], result["batch_invariant"]) == (0, 8, invariant)
        assert result["moved"] >= 1 and result["differ_moved_before_seam"] == 0
    assert out.rstrip().endswith("DRIVER DONE")
    assert not any((run / f).exists() for f in ("supervisor.pid", "gateway.pid", "redis.pid"))  # all stopped
