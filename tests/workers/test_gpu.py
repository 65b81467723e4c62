"""Reading nvidia-smi: the parsers run on captured output (no GPU here)."""

from __future__ import annotations

import pytest

from workers.host import gpu
from workers.host.gpu import DeviceMemory, ProbeError, parse_compute_apps, parse_gpu_memory, parse_uuids

MIB = 1 << 20

# Captured on the lent H200 (bench/gpu/results/nvidia-smi-captured.txt), --format=csv,noheader,nounits.
# --query-gpu=index,memory.used,memory.free,memory.total: idle (615 MiB the driver keeps is in neither
# used nor free), then with the benchmark's three vLLM processes ready.
H200_IDLE = "0, 0, 143156, 143771\n"
H200_THREE = "0, 115906, 27250, 143771\n"
# --query-compute-apps=pid,gpu_uuid,used_memory (the third line is synthetic: [N/A] as some drivers print).
UUID = "GPU-182ebc57-3d24-2902-e58d-fb05d318abdf"
APPS = f"874, {UUID}, 49818\n1783, {UUID}, 20914\n2624, {UUID}, 49764\n4702, {UUID}, [N/A]\n"
UUIDS = f"0, {UUID}\n"
# Synthetic: the same query without the index, on a two-GPU machine.
TWO_GPUS_NO_INDEX = "1, 81037, 81559\n80000, 1559, 81559\n"


def test_parses_gpu_memory_with_index() -> None:
    [d] = parse_gpu_memory(H200_THREE)
    assert d == DeviceMemory(0, 115906 * MIB, 27250 * MIB, 143771 * MIB)
    assert d.covers(27250 * MIB) and not d.covers(27250 * MIB + 1)
    assert d.describe() == "26.6 GiB free of 140.4 GiB"
    [idle] = parse_gpu_memory(H200_IDLE)
    assert idle.used_bytes == 0 and idle.total_bytes - idle.free_bytes == 615 * MIB


def test_lines_without_index_are_numbered_in_order() -> None:
    devices = parse_gpu_memory(TWO_GPUS_NO_INDEX)
    assert [d.index for d in devices] == [0, 1]
    assert devices[1].free_bytes == 1559 * MIB


def test_parses_compute_apps_and_uuids() -> None:
    apps = parse_compute_apps(APPS)
    assert [(a.pid, a.used_bytes >> 20) for a in apps] == [
        (874, 49818),
        (1783, 20914),
        (2624, 49764),
        (4702, 0),
    ]
    assert parse_uuids(UUIDS) == {UUID: 0}
    assert parse_compute_apps("No running processes found\n") == []


@pytest.mark.parametrize(
    "text", ["0, 1, 2, 3, 4\n", "a, b, c, d\n", "0, 1, 2, x\n", "1, 2\n", "[N/A], 1, 2\n"]
)
def test_unreadable_lines_raise(text: str) -> None:
    with pytest.raises(ProbeError, match="nvidia-smi"):
        parse_gpu_memory(text)


def test_probe_is_none_without_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu.shutil, "which", lambda name: None)
    assert gpu.nvidia_smi_probe(0) is None
    with pytest.raises(ProbeError, match="not on PATH"):
        gpu.gpu_memory()


def test_probe_picks_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "query", lambda fields, what="gpu": "0, 1, 2, 3\n1, 10, 20, 30\n")
    probe = gpu.nvidia_smi_probe(1)
    assert probe is not None and probe.free_bytes == 20 * MIB
    assert gpu.nvidia_smi_probe(2) is None


def test_process_memory_maps_pids_to_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {"index,uuid": UUIDS, gpu.APPS_QUERY: APPS}
    monkeypatch.setattr(gpu, "query", lambda fields, what="gpu": answers[fields])
    assert gpu.process_memory()[1783] == (0, 20914 * MIB)
