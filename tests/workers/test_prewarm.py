"""Reading a start from zero's files ahead (workers/replica/prewarm.py) and the supervisor's warm-up loop
of the models that can go to zero (workers/autoscale/warmup.py)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis
import yaml

from llmgw_contract.fleet import parse_fleet
from llmgw_contract.fleet_file import FleetWatch
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryTiming, RegistryWriter
from llmgw_contract.replica_metrics import SupervisorMetrics
from workers.autoscale.warmup import Warmup
from workers.converge.headroom import Headroom
from workers.converge.loop import Reconciler
from workers.life.owner import Supervisor, SupervisorOptions
from workers.replica.launch import Launch, ReplicaSpec
from workers.replica.prewarm import files_under, read_files, warm_plan


def test_the_plan_is_the_engines_import_and_the_local_paths_after_its_module(tmp_path: Path) -> None:
    weights = tmp_path / "w"
    weights.mkdir()
    template = tmp_path / "t.jinja"
    template.write_text("x")
    argv = ["taskset", "-c", "0", "/py", "-m", "vllm.entrypoints.openai.api_server", "--model",
            str(weights), "--chat-template", str(template), "--port", "8000", "--tokenizer", "org/hub-id",
            str(weights)]  # fmt: skip
    plan = warm_plan(Launch(argv, {"A": "1"}))
    assert plan.imports is not None and plan.imports[-3:] == (
        "/py",
        "-c",
        "import vllm.entrypoints.openai.api_server",
    )
    assert plan.paths == (weights, template)  # a hub id and numbers are not paths; each path once
    assert plan.env == {"A": "1"}


def test_a_launch_without_python_m_has_nothing_to_import() -> None:
    assert warm_plan(Launch(["vllm", "serve", "/nowhere"], {})).imports is None


def test_the_files_are_read_through_unless_they_exceed_half_the_available_memory(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a").write_bytes(b"x" * 1000)
    (tmp_path / "sub" / "b").write_bytes(b"y" * 3000)
    assert files_under([tmp_path, tmp_path / "a"]) == [tmp_path / "a", tmp_path / "sub" / "b"]
    read = read_files([tmp_path], available_bytes=None)
    assert (read.files, read.bytes, read.skipped) == (2, 4000, "")
    assert read_files([tmp_path], available_bytes=8000).bytes == 4000
    skipped = read_files([tmp_path], available_bytes=7999)
    assert skipped.bytes == 0 and "more than 50%" in skipped.skipped


async def fits(_: ReplicaSpec) -> Headroom:
    return Headroom(1 << 40, 1)


async def test_the_loop_warms_each_model_at_zero_once_with_the_engines_import(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A model with min_replicas 0 gets its import run (with its launch's environment: the marker module
    on its PYTHONPATH writes a file when imported) and its files read; a model with min 1 does not; a
    second tick within ``rewarm_s`` does nothing."""
    caplog.set_level(logging.INFO)
    (tmp_path / "warmmark.py").write_text(
        "import os, pathlib\npathlib.Path(os.environ['MARK']).write_text('imported')\n"
    )
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"w" * 4096)
    rule = {"min_replicas": 0, "max_replicas": 1, "scale_down_delay_s": 1}
    models = [
        {"name": "z", "source": {"path": str(weights)}, "replicas": 0, "activation": "on_demand",
         "scaling": rule},
        {"name": "one", "source": {"path": "/one"}, "replicas": 1},
    ]  # fmt: skip
    fleet_text = yaml.safe_dump({"models": models})
    mark = tmp_path / "mark"

    def launch_for(spec: ReplicaSpec) -> Launch:
        argv = [
            sys.executable,
            "-m",
            "warmmark",
            "--model",
            str(spec.model.source and spec.model.source.path),
        ]
        return Launch(argv, {"PYTHONPATH": str(tmp_path), "MARK": str(mark)})

    metrics = SupervisorMetrics()
    async with httpx.AsyncClient() as client:
        writer = RegistryWriter(aioredis.Redis(), RedisKeys("w"), RegistryTiming())  # never called here
        sup = Supervisor([], writer, client, SupervisorOptions(), metrics=metrics)
        rec = Reconciler(sup, FleetWatch(tmp_path / "fleet.yaml"), launch_for, fits, tmp_path, 1, metrics)
        rec.fleet = parse_fleet(fleet_text)
        now = [100.0]
        warmup = Warmup(rec, metrics, rewarm_s=60, clock=lambda: now[0], available=lambda: 1 << 30)
        assert warmup.due() == ["z"] and not warmup.warm("z")
        await warmup.tick()
        assert mark.read_text() == "imported"
        assert warmup.warm("z") and warmup.warmed == {"z": 100.0}
        assert "warmup model=z read ahead: the engine's import and 1 files (0 MiB)" in caplog.text
        mark.unlink()
        now[0] += 59
        assert warmup.due() == []  # within rewarm_s
        now[0] += 1
        assert warmup.due() == ["z"]  # again, as the page cache may have dropped it meanwhile
