"""The arithmetic, pinned to what vLLM 0.26 measured on an H200 (shared/gpu/NOTES.md)."""

from __future__ import annotations

from typing import Any

import pytest

from workers.planner import memory as mem
from workers.planner.model_shape import Quantization, shape_from_config
from workers.replica.oom import next_backoff_budget

H200 = 143_771 * mem.MIB
MEASURED_WEIGHTS_GIB = {"llama": 12.81, "qwen2": 14.29, "gemma": 15.91}
MEASURED_KV_TOKENS_AT_030 = {"llama": 57_696, "qwen2": 492_464, "gemma": 56_752}
MEASURED_KV_GIB_AT_030 = {"llama": 28.18, "qwen2": 26.3, "gemma": 24.25}
KNOWN_PARAMS_B = {"llama": 6.74, "qwen2": 7.62, "gemma": 8.54}
KV_PER_TOKEN = {"llama": 524_288, "qwen2": 57_344, "gemma": 458_752}


def _weights(cfg: dict[str, Any]) -> int:
    return mem.weight_bytes(mem.count_params(shape_from_config(cfg)), 2.0)


@pytest.mark.parametrize("key", sorted(MEASURED_WEIGHTS_GIB))
def test_parameter_count_matches_the_published_size(configs: dict[str, dict[str, Any]], key: str) -> None:
    total = mem.count_params(shape_from_config(configs[key])).total
    assert total / 1e9 == pytest.approx(KNOWN_PARAMS_B[key], abs=0.005)


@pytest.mark.parametrize("key", sorted(MEASURED_WEIGHTS_GIB))
def test_weight_memory_within_3_percent_of_vllm(configs: dict[str, dict[str, Any]], key: str) -> None:
    assert _weights(configs[key]) / mem.GIB == pytest.approx(MEASURED_WEIGHTS_GIB[key], rel=0.03)


@pytest.mark.parametrize("key", sorted(KV_PER_TOKEN))
def test_kv_bytes_per_token(configs: dict[str, dict[str, Any]], key: str) -> None:
    assert mem.kv_bytes_per_token(shape_from_config(configs[key]), 2.0) == KV_PER_TOKEN[key]


@pytest.mark.parametrize("key", sorted(MEASURED_KV_TOKENS_AT_030))
def test_kv_tokens_at_budget_030_within_3_percent(configs: dict[str, dict[str, Any]], key: str) -> None:
    shape = shape_from_config(configs[key])
    other = mem.RuntimeProfile().in_budget_other(shape.vocab_size, mem.default_max_num_seqs(H200))
    kv = mem.kv_cache_bytes(0.30, H200, _weights(configs[key]), other)
    tokens = mem.kv_tokens(kv, mem.kv_bytes_per_token(shape, 2.0))
    assert tokens % mem.GPU_BLOCK_SIZE == 0
    assert tokens == pytest.approx(MEASURED_KV_TOKENS_AT_030[key], rel=0.03)


@pytest.mark.parametrize("key", sorted(MEASURED_KV_GIB_AT_030))
def test_in_budget_other_fits_the_measured_residual(configs: dict[str, dict[str, Any]], key: str) -> None:
    """0.30 x device - measured weights - measured KV is what vLLM kept; the fit is within 0.05 GiB."""
    residual = 0.30 * H200 / mem.GIB - MEASURED_WEIGHTS_GIB[key] - MEASURED_KV_GIB_AT_030[key]
    vocab = shape_from_config(configs[key]).vocab_size
    assert mem.RuntimeProfile().in_budget_other(vocab, 1024) / mem.GIB == pytest.approx(residual, abs=0.05)


def test_kv_tokens_round_down_to_whole_blocks() -> None:
    assert mem.kv_tokens(100 * 17 + 5, 100) == 16
    assert mem.kv_tokens(-5, 100) == 0


def test_max_num_seqs_default_follows_the_card() -> None:
    assert mem.default_max_num_seqs(H200) == 1024
    assert mem.default_max_num_seqs(24 * mem.GIB) == 256


@pytest.mark.parametrize(
    ("name", "size"), [("bfloat16", 2), ("float16", 2), ("float32", 4), ("fp8", 1), ("int4", 0.5)]
)
def test_dtype_bytes(name: str, size: float) -> None:
    assert mem.dtype_bytes(name) == size


def test_unknown_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown dtype"):
        mem.dtype_bytes("float12")


def test_int4_costs_half_a_byte_plus_group_scales(configs: dict[str, dict[str, Any]]) -> None:
    q = Quantization("awq", 4, 128)
    assert mem.linear_bytes_per_param(q, 2.0) == pytest.approx(0.5 + 2.5 / 128)
    params = mem.count_params(shape_from_config(configs["llama"]))
    int4 = mem.weight_bytes(params, 2.0, q)
    expected = params.linear * (0.5 + 2.5 / 128) + params.unquantized * 2
    assert int4 == pytest.approx(expected, rel=1e-9)
    assert mem.weight_bytes(params, 2.0, Quantization("fp8", 8)) < mem.weight_bytes(params, 2.0) * 0.55


def test_tensor_parallel_splits_kv_heads_but_never_below_one(configs: dict[str, dict[str, Any]]) -> None:
    qwen = shape_from_config(configs["qwen2"])
    assert mem.kv_bytes_per_token(qwen, 2.0, tp=2) == KV_PER_TOKEN["qwen2"] // 2
    assert mem.kv_heads_per_rank(qwen, 8) == 1


def test_budget_needed_rounds_up_to_the_grid() -> None:
    assert mem.budget_needed(10 * mem.GIB, 0, 0, 100 * mem.GIB) == 0.1
    assert mem.budget_needed(10 * mem.GIB + mem.MIB, 0, 0, 100 * mem.GIB) == 0.101


def test_split_budgets_fills_what_is_available() -> None:
    out = mem.split_budgets([0.2, 0.1], [3.0, 1.0], 0.7)
    assert out is not None
    assert out == [0.5, 0.2]
    assert sum(out) <= 0.7 + 1e-9


def test_split_budgets_refuses_when_needs_exceed() -> None:
    assert mem.split_budgets([0.5, 0.4], [1.0, 1.0], 0.8) is None


@pytest.mark.parametrize(
    ("current", "floor", "step", "expected"),
    [(0.30, 0.10, 0.05, 0.25), (0.15, 0.10, 0.05, 0.10), (0.12, 0.10, 0.05, None), (0.10, 0.10, 0.05, None),
     (0.9, 0.5, 0.1, 0.8), (0.05, 0.01, 0.05, None)],
)  # fmt: skip
def test_next_backoff_budget(current: float, floor: float, step: float, expected: float | None) -> None:
    assert next_backoff_budget(current, floor, step) == expected


def test_backoff_walks_down_to_the_floor_exactly() -> None:
    seen, b = [], 0.9
    while (nxt := next_backoff_budget(b, 0.6)) is not None:
        seen.append(nxt)
        b = nxt
    assert seen == [0.85, 0.8, 0.75, 0.7, 0.65, 0.6]


def test_backoff_rejects_a_non_positive_step() -> None:
    with pytest.raises(ValueError):
        next_backoff_budget(0.5, 0.1, 0)


def test_rule_of_thumb() -> None:
    assert mem.rule_of_thumb_gb(7_000_000_000, 16) == pytest.approx(17.5)
    assert mem.rule_of_thumb_gb(7_000_000_000, 4) == pytest.approx(28.0)
