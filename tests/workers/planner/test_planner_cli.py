"""llmgw-plan: arguments, the printed arithmetic, and the exit status."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.planner import memory as mem
from workers.planner.cli import H200_BYTES, device_sizes, main

CONFIGS = Path(__file__).parent / "configs"


def _fleet(
    tmp_path: Path, budget: float | None, shapes: tuple[str, ...] = ("llama-2-7b", "qwen2-7b", "gemma-7b")
) -> Path:
    lines = ["defaults: {device: gpu}", "models:"]
    for shape in shapes:
        lines += [
            f"  - name: {shape}",
            f"    source: {{package: {shape}}}",
            "    engine: {max_model_len: 4096}",
        ]
        if budget is not None:
            lines.append(f"    budget: {{gpu_memory_utilization: {budget}}}")
    path = tmp_path / "fleet.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_fitting_fleet_prints_the_table_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["--fleet", str(_fleet(tmp_path, 0.30)), "--models-dir", str(CONFIGS)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "llama-2-7b#0" in out and "KV tokens" in out and "Verdict: the fleet fits." in out


def test_an_oversubscribed_fleet_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        ["--fleet", str(_fleet(tmp_path, 0.33)), "--config-dir", str(CONFIGS), "--gpu-memory-gib", "140.4"]
    )
    out = capsys.readouterr().out
    assert rc == 1
    assert "device 0 is oversubscribed" in out


def test_target_and_reserve_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--fleet", str(_fleet(tmp_path, None)), "--config-dir", str(CONFIGS), "--target", "0.7"]
    assert main([*args, "--reserve-gib", "1.5"]) == 0
    out = capsys.readouterr().out
    assert "fill 70% of each device" in out and "Reserve: 1.50 GiB" in out


def test_two_gpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--fleet", str(_fleet(tmp_path, 0.6)), "--config-dir", str(CONFIGS), "--gpus", "3"]
    assert main(args) == 0
    assert "Device 2 (140.40 GiB" in capsys.readouterr().out


def test_missing_config_is_a_refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--fleet", str(_fleet(tmp_path, 0.3)), "--models-dir", str(tmp_path)]) == 1
    assert "no config.json for model 'llama-2-7b'" in capsys.readouterr().out


def test_unreadable_fleet_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--fleet", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--gpu-memory-gib" in out and "--target" in out and "--config-dir" in out


def test_device_sizes() -> None:
    assert device_sizes(None, None) == {0: H200_BYTES}
    assert device_sizes([80.0], 2) == {0: 80 * mem.GIB, 1: 80 * mem.GIB}
    assert device_sizes([80.0, 40.0], None) == {0: 80 * mem.GIB, 1: 40 * mem.GIB}
    with pytest.raises(ValueError, match="--gpus 3"):
        device_sizes([80.0, 40.0], 3)


def test_a_scaling_maximum_the_devices_cannot_hold_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _fleet(tmp_path, 0.30)
    path.write_text(path.read_text() + "    scaling: {min_replicas: 1, max_replicas: 2}\n")
    rc = main(["--fleet", str(path), "--config-dir", str(CONFIGS)])
    out = capsys.readouterr().out
    assert rc == 1, out
    before, _, after = out.partition("At every model's scaling.max_replicas")
    assert "Verdict: the fleet fits." in before and "gemma-7b#1" in after
    assert "device 0 is oversubscribed" in after
