"""Fixtures of the planner tests: the three 7B shapes measured on an H200, and a fleet builder."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from llmgw_contract.fleet import Fleet, Model

CONFIGS = Path(__file__).parent / "configs"
SHAPES = {"llama": "llama-2-7b", "qwen2": "qwen2-7b", "gemma": "gemma-7b"}
H200 = 143_771 << 20


def read_shape_config(key: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / SHAPES[key] / "config.json").read_text())
    return data


@pytest.fixture
def configs() -> dict[str, dict[str, Any]]:
    return {k: read_shape_config(k) for k in SHAPES}


@pytest.fixture
def loader(configs: dict[str, dict[str, Any]]) -> Callable[[Model], Mapping[str, Any]]:
    """Configs by the model's source.path folder name (llama-2-7b, ...), as passed to plan_fleet."""
    by_folder = {SHAPES[k]: cfg for k, cfg in configs.items()}

    def load(model: Model) -> Mapping[str, Any]:
        assert model.source is not None and model.source.path is not None
        return by_folder[model.source.path.name]

    return load


def model_entry(name: str, shape: str, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "source": {"path": str(CONFIGS / SHAPES[shape])}}
    entry["engine"] = {"max_model_len": 4096, **extra.pop("engine", {})}
    entry.update(extra)
    return entry


@pytest.fixture
def entry() -> Callable[..., dict[str, Any]]:
    """model_entry(name, shape, **fields): one fleet model on a test config."""
    return model_entry


@pytest.fixture
def make_fleet() -> Callable[..., Fleet]:
    def build(*models: dict[str, Any]) -> Fleet:
        return Fleet.model_validate({"defaults": {"device": "gpu"}, "models": list(models)})

    return build
