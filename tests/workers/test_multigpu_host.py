"""Several GPUs of one host, seen through the FAKE nvidia-smi (testing/fake_nvidia_smi.py) on PATH: the
supervisor spreads over the GPUs nvidia-smi reports and refuses, at start, a fleet those GPUs cannot
place, with one line per replica naming the model, the devices and the arithmetic."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testing.fake_nvidia_smi import fake_gpu_env
from workers.cli import device_count, main, parse_args
from workers.host.gpu import gpu_memory, process_memory

FLEET = """defaults: {{device: gpu}}
models:
 - name: small
   source: {{path: /m/small}}
   budget: {{gpu_memory_utilization: 0.4}}
 - name: big
   source: {{path: /m/big}}
   engine: {{tensor_parallel_size: {tp}}}
   budget: {{gpu_memory_utilization: 0.5}}
   placement: {{devices: {devices}}}
"""


@pytest.fixture(autouse=True)
def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for k, v in fake_gpu_env(tmp_path, count=2).items():
        monkeypatch.setenv(k, v)
    return tmp_path / "gpu-mem"


def fleet_file(tmp: Path, tp: int = 1, devices: str = "[1]") -> Path:
    path = tmp / "fleet.yaml"
    path.write_text(FLEET.format(tp=tp, devices=devices))
    return path


def test_the_fake_nvidia_smi_books_an_engine_on_each_of_its_devices(fake_gpus: Path) -> None:
    (fake_gpus / "tp").write_text(f"{os.getpid()} 1000 0,1\n")  # a tensor-parallel engine (this process)
    (fake_gpus / "one").write_text(f"{os.getppid()} 300 1\n")
    assert [(c.index, c.used_bytes >> 20) for c in gpu_memory()] == [(0, 1000), (1, 1300)]
    assert process_memory()[os.getppid()] == (1, 300 << 20)


def test_a_gpu_fleet_spreads_over_the_gpus_nvidia_smi_reports(tmp_path: Path) -> None:
    args = parse_args(["--fleet", str(fleet_file(tmp_path))])
    assert device_count(args) == 2
    assert device_count(parse_args(["--fleet", str(fleet_file(tmp_path)), "--devices", "5"])) == 5


def test_a_fleet_the_gpus_cannot_place_is_refused_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--fleet", str(fleet_file(tmp_path, tp=2, devices="[1, 2]"))]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "llmgw-workers: the fleet cannot be placed: model 'big' replica 0: placement.devices puts it on "
        "gpu 1,2 but the host has 2 gpu(s): 0, 1 (no 2). Change placement.devices."
    )


def test_a_tensor_parallel_replica_wider_than_the_host_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_GPU_COUNT", "1")
    assert main(["--fleet", str(fleet_file(tmp_path, tp=2, devices="[]"))]) == 2
    err = capsys.readouterr().err
    assert "model 'big' replica 0: tensor_parallel_size 2 needs 2 distinct devices" in err
    assert "the host has 1 gpu(s): 0" in err
