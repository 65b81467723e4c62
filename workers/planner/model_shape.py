"""A model's shape, read from its Hugging Face ``config.json``.

:func:`shape_from_config` is pure (a mapping in, a :class:`ModelShape` out); the functions at the end
find and read the file for a fleet model (a local folder, a prepared package folder, the Hugging Face
cache, or an override folder).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmgw_contract.fleet import Model

ConfigLoader = Callable[[Model], Mapping[str, Any]]

# Families whose MLP is a plain up/down pair (no gate); every other family is counted as gated (SwiGLU/GeGLU).
_UNGATED = frozenset(
    {"gpt2", "gpt_neox", "gptj", "opt", "phi", "falcon", "bloom", "starcoder2", "gpt_bigcode"}
)
# Families with biases on q/k/v (not on o) although their config has no ``attention_bias`` key.
_QKV_BIAS = frozenset({"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"})
# Families whose input and output embeddings are tied when the config does not say.
_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})
# Families with four RMSNorms per layer (pre/post attention and MLP) instead of two.
_FOUR_NORMS = frozenset({"gemma2", "gemma3", "gemma3_text"})
# Families with per-head q/k RMSNorms.
_QK_NORM = frozenset({"qwen3", "qwen3_moe", "gemma3", "gemma3_text", "olmo2"})


class ShapeError(ValueError):
    """config.json lacks something the planner needs; the message names the key."""


@dataclass(frozen=True)
class Quantization:
    """How the linear layers' weights are stored (embeddings, lm_head and norms stay 16-bit)."""

    method: str
    bits: int
    group_size: int | None = None


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only transformer that decide its memory."""

    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    torch_dtype: str
    max_position_embeddings: int | None = None
    gated_mlp: bool = True
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    norms_per_layer: int = 2
    qk_norm: bool = False
    num_experts: int = 0
    shared_expert_intermediate_size: int = 0
    quantization: Quantization | None = None

    def describe(self) -> str:
        parts = [
            f"{self.model_type}: hidden {self.hidden_size}",
            f"{self.num_layers} layers",
            f"heads {self.num_heads} q / {self.num_kv_heads} kv x {self.head_dim}",
            f"mlp {self.intermediate_size}",
            f"vocab {self.vocab_size}",
            "tied" if self.tie_word_embeddings else "untied",
        ]
        if self.num_experts:
            parts.append(f"{self.num_experts} experts")
        if self.qkv_bias:
            parts.append("qkv bias")
        if self.quantization:
            parts.append(f"{self.quantization.method} {self.quantization.bits}-bit")
        return ", ".join(parts)


def _pick(cfg: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


def _need_int(cfg: Mapping[str, Any], *keys: str) -> int:
    value = _pick(cfg, *keys)
    if value is None:
        raise ShapeError(f"config.json has none of {', '.join(keys)}")
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ShapeError(f"config.json {keys[0]} must be a positive integer, got {value!r}")
    return value


def _text_part(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """Multimodal configs keep the language model under ``text_config``; top-level keys fill the gaps."""
    text = cfg.get("text_config")
    if isinstance(text, Mapping):
        return {**cfg, **text}
    return cfg


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def quantization_from_config(cfg: Mapping[str, Any]) -> Quantization | None:
    """Read ``quantization_config`` (GPTQ/AWQ bits, fp8, bitsandbytes, compressed-tensors)."""
    q = cfg.get("quantization_config")
    if not isinstance(q, Mapping):
        return None
    method = str(q.get("quant_method", "unknown")).lower()
    group = _int_or_none(_pick(q, "group_size", "q_group_size"))
    if method == "fp8" or "fp8" in str(q.get("fmt", "")):
        return Quantization(method, 8)
    if q.get("load_in_4bit"):
        return Quantization(method, 4, group or 64)
    if q.get("load_in_8bit"):
        return Quantization(method, 8)
    bits = _int_or_none(_pick(q, "bits", "w_bit", "weight_bits"))
    if bits is None:
        bits, group = _compressed_tensors_bits(q, group)
    if bits is None:
        raise ShapeError(f"config.json quantization_config ({method}) does not say how many bits")
    return Quantization(method, bits, group)


def _compressed_tensors_bits(q: Mapping[str, Any], group: int | None) -> tuple[int | None, int | None]:
    groups = q.get("config_groups")
    if not isinstance(groups, Mapping):
        return None, group
    for g in groups.values():
        weights = g.get("weights") if isinstance(g, Mapping) else None
        if isinstance(weights, Mapping) and _int_or_none(weights.get("num_bits")):
            return int(weights["num_bits"]), _int_or_none(weights.get("group_size")) or group
    return None, group


def shape_from_config(config: Mapping[str, Any]) -> ModelShape:
    """Turn a Hugging Face config into the numbers the memory arithmetic needs."""
    cfg = _text_part(config)
    model_type = str(cfg.get("model_type", "unknown"))
    hidden = _need_int(cfg, "hidden_size", "n_embd", "d_model")
    heads = _need_int(cfg, "num_attention_heads", "n_head")
    kv_heads = _int_or_none(_pick(cfg, "num_key_value_heads", "num_kv_heads")) or heads
    experts = _int_or_none(_pick(cfg, "num_local_experts", "num_experts", "n_routed_experts")) or 0
    inter_keys = ("moe_intermediate_size", "intermediate_size") if experts else ("intermediate_size",)
    intermediate = _int_or_none(_pick(cfg, *inter_keys, "ffn_dim", "n_inner")) or 4 * hidden
    tied = cfg.get("tie_word_embeddings")
    return ModelShape(
        model_type=model_type,
        hidden_size=hidden,
        num_layers=_need_int(cfg, "num_hidden_layers", "n_layer", "num_layers"),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=_int_or_none(cfg.get("head_dim")) or hidden // heads,
        intermediate_size=intermediate,
        vocab_size=_need_int(cfg, "vocab_size"),
        tie_word_embeddings=bool(tied) if tied is not None else model_type in _TIED_BY_DEFAULT,
        torch_dtype=str(_pick(cfg, "torch_dtype", "dtype") or "bfloat16"),
        max_position_embeddings=_int_or_none(_pick(cfg, "max_position_embeddings", "n_positions")),
        gated_mlp=model_type not in _UNGATED,
        qkv_bias=bool(cfg.get("attention_bias")) or model_type in _QKV_BIAS,
        o_bias=bool(cfg.get("attention_bias")),
        mlp_bias=bool(cfg.get("mlp_bias")),
        norms_per_layer=4 if model_type in _FOUR_NORMS else 2,
        qk_norm=model_type in _QK_NORM,
        num_experts=experts,
        shared_expert_intermediate_size=_int_or_none(cfg.get("shared_expert_intermediate_size")) or 0,
        quantization=quantization_from_config(cfg),
    )


# --- finding and reading config.json (I/O) -------------------------------------------------------------


class ConfigNotFound(FileNotFoundError):
    """No config.json for a model; the message lists where the planner looked."""


def _hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME")
    return (Path(home) if home else Path.home() / ".cache" / "huggingface") / "hub"


def _hf_snapshot_configs(repo_id: str) -> list[Path]:
    repo = _hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    ref = repo / "refs" / "main"
    if ref.is_file():
        pinned = repo / "snapshots" / ref.read_text().strip() / "config.json"
        if pinned.is_file():
            return [pinned]
    return sorted((repo / "snapshots").glob("*/config.json"))


def config_candidates(model: Model, models_dir: Path, config_dir: Path | None = None) -> list[Path]:
    """Where a model's config.json may be, in the order the planner tries them."""
    out: list[Path] = []
    if config_dir is not None:
        out += [config_dir / model.name / "config.json", config_dir / f"{model.name.replace('/', '--')}.json"]
    src = model.source
    if src is not None and src.path is not None:
        out.append(src.path / "config.json")
    if src is not None and src.package is not None:
        out.append(models_dir / src.package / "config.json")
    if src is not None and src.hf is not None:
        out += _hf_snapshot_configs(src.hf) or [_hf_cache_dir() / f"models--{src.hf.replace('/', '--')}"]
    return out


def read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ShapeError(f"{path}: cannot read config.json: {exc}") from exc
    if not isinstance(data, dict):
        raise ShapeError(f"{path}: config.json is not a JSON object")
    return data


def make_config_loader(
    models_dir: Path = Path(".cache/models"), config_dir: Path | None = None
) -> ConfigLoader:
    """A loader for :func:`workers.planner.plan.plan_fleet` that reads config.json from disk."""

    def load(model: Model) -> dict[str, Any]:
        tried = config_candidates(model, models_dir, config_dir)
        for path in tried:
            if path.is_file():
                return read_config(path)
        where = ", ".join(str(p) for p in tried) or "nowhere (no source)"
        raise ConfigNotFound(f"no config.json for model {model.name!r}; looked in {where}")

    return load
