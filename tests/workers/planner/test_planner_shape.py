"""config.json -> ModelShape, and finding config.json for a fleet model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmgw_contract.fleet import Model
from workers.planner.model_shape import (
    ConfigNotFound,
    ShapeError,
    make_config_loader,
    quantization_from_config,
    shape_from_config,
)


def test_llama_shape(configs: dict[str, dict[str, Any]]) -> None:
    s = shape_from_config(configs["llama"])
    assert (s.hidden_size, s.num_layers, s.num_heads, s.num_kv_heads, s.head_dim) == (4096, 32, 32, 32, 128)
    assert (s.intermediate_size, s.vocab_size, s.tie_word_embeddings, s.qkv_bias) == (
        11008,
        32000,
        False,
        False,
    )
    assert s.max_position_embeddings == 4096 and s.torch_dtype == "float16"


def test_qwen2_shape_has_gqa_and_qkv_bias(configs: dict[str, dict[str, Any]]) -> None:
    s = shape_from_config(configs["qwen2"])
    assert (s.num_heads, s.num_kv_heads, s.head_dim) == (28, 4, 128)
    assert s.qkv_bias and not s.o_bias and not s.tie_word_embeddings


def test_gemma_shape_has_wide_heads_and_tied_embeddings(configs: dict[str, dict[str, Any]]) -> None:
    s = shape_from_config(configs["gemma"])
    assert (s.num_heads, s.head_dim, s.vocab_size) == (16, 256, 256000)
    assert s.tie_word_embeddings


def test_defaults_when_keys_are_missing() -> None:
    s = shape_from_config(
        {
            "model_type": "gemma",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "vocab_size": 10,
        }
    )
    assert s.num_kv_heads == 4 and s.head_dim == 16 and s.intermediate_size == 256
    assert s.tie_word_embeddings  # gemma ties by default


def test_text_config_of_a_multimodal_model() -> None:
    cfg = {
        "model_type": "llava",
        "text_config": {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "vocab_size": 100},
    }  # fmt: skip
    assert shape_from_config(cfg).hidden_size == 64


def test_missing_key_is_named() -> None:
    with pytest.raises(ShapeError, match="num_hidden_layers"):
        shape_from_config({"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10})


@pytest.mark.parametrize(
    ("qcfg", "bits", "group"),
    [
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, 4, 128),
        ({"quant_method": "gptq", "bits": 8, "group_size": -1}, 8, -1),
        ({"quant_method": "fp8"}, 8, None),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, 4, 64),
        ({"quant_method": "compressed-tensors",
          "config_groups": {"g": {"weights": {"num_bits": 4, "group_size": 32}}}}, 4, 32),
    ],
)  # fmt: skip
def test_quantization(qcfg: dict[str, Any], bits: int, group: int | None) -> None:
    q = quantization_from_config({"quantization_config": qcfg})
    assert q is not None and (q.bits, q.group_size) == (bits, group)


def _model(**source: str) -> Model:
    return Model.model_validate({"name": "m", "source": source})


def test_loader_reads_source_path(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 1}))
    assert make_config_loader()(_model(path=str(tmp_path)))["hidden_size"] == 1


def test_loader_reads_prepared_package_and_config_dir_wins(tmp_path: Path) -> None:
    (tmp_path / "models" / "pkg").mkdir(parents=True)
    (tmp_path / "models" / "pkg" / "config.json").write_text(json.dumps({"from": "package"}))
    assert make_config_loader(tmp_path / "models")(_model(package="pkg"))["from"] == "package"
    (tmp_path / "over").mkdir()
    (tmp_path / "over" / "m.json").write_text(json.dumps({"from": "override"}))
    load = make_config_loader(tmp_path / "models", tmp_path / "over")
    assert load(_model(package="pkg"))["from"] == "override"


def test_loader_reads_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snap = tmp_path / "models--org--name" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"from": "hub"}))
    (tmp_path / "models--org--name" / "refs").mkdir()
    (tmp_path / "models--org--name" / "refs" / "main").write_text("abc\n")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert make_config_loader()(_model(hf="org/name"))["from"] == "hub"


def test_loader_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(ConfigNotFound, match=r"pkg/config\.json"):
        make_config_loader(tmp_path)(_model(package="pkg"))
