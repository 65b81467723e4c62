"""The FAKE GPU ENGINE taught the lent H200 (``--profile h200``, testing/gpu_profile.py): it holds the
measured MiB awake and asleep per level, and each sleep-mode call takes the measured seconds times
``--time-scale``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx

from testing.gpu_profile import h200_7b
from testing.poll import wait_until
from testing.procs import free_port, http_ok, running, spawn
from workers.ondemand.autopilot.costs import H200_SECONDS
from workers.ondemand.autopilot.h200 import BUDGET, H200_7B, MIB

SCALE = 0.02


def test_the_h200_profile_reads_the_recorded_numbers() -> None:
    p = h200_7b()
    assert (p.sleep1_s, p.wake1_s, p.start_s) == tuple(H200_SECONDS[m] for m in ("sleep1", "wake1", "start"))
    assert abs(p.wake2_weights_s + p.wake2_reload_s + p.wake2_kv_s - H200_SECONDS["wake2"]) < 1e-9
    assert p.scaled(0.5).sleep1_s == H200_SECONDS["sleep1"] / 2 and p.scaled(0.5).asleep1_mib == 1601


def timed(c: httpx.Client, url: str, body: bytes = b"") -> float:
    t = time.perf_counter()
    assert c.post(url, content=body).status_code == 200
    return time.perf_counter() - t


def test_the_taught_engine_holds_the_measured_memory_and_takes_the_scaled_seconds(tmp_path: Path) -> None:
    port, mem = free_port(), tmp_path / "mem"
    mem.mkdir()
    argv = [sys.executable, "-m", "testing.fake_gpu_engine", "--port", str(port), "--enable-sleep-mode"]
    argv += ["--gpu-memory-utilization", str(BUDGET), "--profile", "h200", "--time-scale", str(SCALE)]
    started = time.perf_counter()
    with running(spawn(argv, port, tmp_path / "engine.log", {"FAKE_GPU_MEMORY_DIR": str(mem)})) as p:
        wait_until(lambda: http_ok(f"{p.url}/health"), 15, "taught engine")
        assert time.perf_counter() - started >= H200_SECONDS["start"] * SCALE

        def held_mib() -> int:
            return int((mem / str(port)).read_text().split()[1])

        assert held_mib() * MIB == H200_7B.awake
        with httpx.Client(base_url=p.url, timeout=10) as c:
            assert timed(c, "/sleep?level=1") >= H200_SECONDS["sleep1"] * SCALE
            assert held_mib() * MIB == H200_7B.asleep1
            assert timed(c, "/wake_up") >= H200_SECONDS["wake1"] * SCALE
            assert timed(c, "/sleep?level=2") < H200_SECONDS["sleep1"] * SCALE
            assert held_mib() * MIB == H200_7B.asleep2
            wake2 = timed(c, "/wake_up?tags=weights")
            wake2 += timed(c, "/collective_rpc", b'{"method": "reload_weights"}')
            wake2 += timed(c, "/wake_up?tags=kv_cache")
            assert wake2 >= H200_SECONDS["wake2"] * SCALE - 1e-3
            assert held_mib() * MIB == H200_7B.awake
