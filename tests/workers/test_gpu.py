"""Reading nvidia-smi: the parsers run on captured output (no GPU here)."""

from __future__ import annotations

import pytest

from workers import gpu
from workers.gpu import DeviceMemory, ProbeError, parse_compute_apps, parse_gpu_memory, parse_uuids

MIB = 1 << 20

# nvidia-smi --query-gpu=index,memory.used,memory.free,memory.total --format=csv,noheader,nounits
# on the lent H200 with three vLLM processes (see bench/gpu/results/).
H200_THREE = "0, 121000, 22216, 143771\n"
# The same query without the index, on a two-GPU machine.
TWO_GPUS_NO_INDEX = "1, 81037, 81559\n80000, 1559, 81559\n"
# nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits
APPS = (
    "4121, GPU-6a3f0d52-8d1e-4c1b-b3f0-7e2a9d9f1c11, 40612\n"
    "4388, GPU-6a3f0d52-8d1e-4c1b-b3f0-7e2a9d9f1c11, 41230\n"
    "4702, GPU-6a3f0d52-8d1e-4c1b-b3f0-7e2a9d9f1c11, [N/A]\n"
)
UUIDS = "0, GPU-6a3f0d52-8d1e-4c1b-b3f0-7e2a9d9f1c11\n"


def test_parses_gpu_memory_with_index() -> None:
    [d] = parse_gpu_memory(H200_THREE)
    assert d == DeviceMemory(0, 121000 * MIB, 22216 * MIB, 143771 * MIB)
    assert d.covers(22216 * MIB) and not d.covers(22216 * MIB + 1)
    assert d.describe() == "21.7 GiB free of 140.4 GiB"


def test_lines_without_index_are_numbered_in_order() -> None:
    devices = parse_gpu_memory(TWO_GPUS_NO_INDEX)
    assert [d.index for d in devices] == [0, 1]
    assert devices[1].free_bytes == 1559 * MIB


def test_parses_compute_apps_and_uuids() -> None:
    apps = parse_compute_apps(APPS)
    assert [(a.pid, a.used_bytes) for a in apps] == [(4121, 40612 * MIB), (4388, 41230 * MIB), (4702, 0)]
    assert parse_uuids(UUIDS) == {"GPU-6a3f0d52-8d1e-4c1b-b3f0-7e2a9d9f1c11": 0}
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
    assert gpu.process_memory()[4388] == (0, 41230 * MIB)
