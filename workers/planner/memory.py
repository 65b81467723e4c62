"""The memory arithmetic of one vLLM process, with no I/O.

How vLLM sizes a process on a GPU (V1 engine)::

    KV cache bytes = gpu_memory_utilization x device bytes - weights - in-budget other
    KV tokens      = whole blocks (16 tokens on GPU) of KV bytes / KV bytes per token
    device use     = gpu_memory_utilization x device bytes + reserve      (reserve: outside the budget)

*In-budget other* is what vLLM's start-up profile run finds besides the weights: the torch activation
peak of one dummy batch plus the non-torch memory that grew meanwhile.  Fitted on an H200
(143,771 MiB, vLLM 0.26, defaults max_num_batched_tokens 8192 and max_num_seqs 1024) from three
measured points (Llama-2-7B, Qwen2-7B, Gemma-7B shapes at budget 0.30)::

    in-budget other = 1004 MiB + max_num_seqs x vocab_size x 4 bytes

The second term is one float32 logits tensor of the sampler's warm-up (max_num_seqs rows of the
vocabulary); it is what grows from Llama (vocab 32,000: 0.12 GiB) to Gemma (256,000: 0.98 GiB).  The
constant holds the forward pass's activation peak over 8192 tokens and the non-torch growth (cuBLAS
workspaces, compile buffers); the three points cannot tell those apart.  A free least-squares fit of
``a + b x (S x V x 4 B)`` gives b = 0.97, so the one-logits-copy reading is what the data say.
Residuals: -0.028, +0.031, -0.003 GiB (at most 0.12 % of the KV cache).

Weights come out at 12.55, 14.19 and 15.90 GiB against vLLM's 12.81, 14.29 and 15.91.  The Llama gap
(-2.0 %) is exactly two 4096-wide matrices of 17,152 rows: the measured run most likely used vocab
49,152 (a SmolLM2 tokenizer) where the Llama-2 shape has 32,000.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from workers.planner.model_shape import ModelShape, Quantization

MIB = 1 << 20
GIB = 1 << 30
GB = 10**9

DEFAULT_RESERVE_BYTES = 2 * GIB
"""Per-process memory outside the budget (CUDA context, CUDA graphs, NCCL): 1.2-2.6 GiB on an H200."""
IN_BUDGET_BASE_BYTES = 1004 * MIB
LOGITS_BYTES_PER_ELEMENT = 4
GPU_BLOCK_SIZE = 16
BUDGET_STEP = 0.001

_DTYPE_BYTES = {
    "float32": 4.0, "fp32": 4.0, "float": 4.0,
    "float16": 2.0, "fp16": 2.0, "half": 2.0,
    "bfloat16": 2.0, "bf16": 2.0,
    "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "int8": 1.0,
    "int4": 0.5,
}  # fmt: skip


def dtype_bytes(name: str) -> float:
    """Bytes per element of a dtype name as vLLM and Hugging Face spell it."""
    key = name.lower().removeprefix("torch.")
    if key not in _DTYPE_BYTES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(sorted(_DTYPE_BYTES))}")
    return _DTYPE_BYTES[key]


@dataclass(frozen=True)
class ParamCount:
    """Parameters by part; ``attention`` and ``mlp`` are the linear layers that quantization shrinks."""

    embeddings: int
    attention: int
    mlp: int
    norms: int
    lm_head: int

    @property
    def total(self) -> int:
        return self.embeddings + self.attention + self.mlp + self.norms + self.lm_head

    @property
    def linear(self) -> int:
        return self.attention + self.mlp

    @property
    def unquantized(self) -> int:
        return self.embeddings + self.norms + self.lm_head


def attention_params(s: ModelShape) -> int:
    q = s.num_heads * s.head_dim
    kv = s.num_kv_heads * s.head_dim
    weights = s.hidden_size * (q + 2 * kv) + q * s.hidden_size
    biases = (q + 2 * kv if s.qkv_bias else 0) + (s.hidden_size if s.o_bias else 0)
    return weights + biases + (2 * s.head_dim if s.qk_norm else 0)


def _mlp_params(hidden: int, inter: int, gated: bool, bias: bool) -> int:
    mats = 3 if gated else 2
    return mats * hidden * inter + ((mats - 1) * inter + hidden if bias else 0)


def mlp_params(s: ModelShape) -> int:
    one = _mlp_params(s.hidden_size, s.intermediate_size, s.gated_mlp, s.mlp_bias)
    if not s.num_experts:
        return one
    shared = s.shared_expert_intermediate_size
    shared_params = _mlp_params(s.hidden_size, shared, True, False) if shared else 0
    return s.num_experts * one + s.hidden_size * s.num_experts + shared_params


def count_params(s: ModelShape) -> ParamCount:
    """Embeddings, q/k/v/o (GQA, biases), MLP gate/up/down (or experts), norms, lm_head unless tied."""
    embed = s.vocab_size * s.hidden_size
    return ParamCount(
        embeddings=embed,
        attention=s.num_layers * attention_params(s),
        mlp=s.num_layers * mlp_params(s),
        norms=(s.num_layers * s.norms_per_layer + 1) * s.hidden_size,
        lm_head=0 if s.tie_word_embeddings else embed,
    )


def linear_bytes_per_param(quant: Quantization | None, act_bytes: float) -> float:
    """Bytes per weight of a linear layer: the activation dtype, or k/8 plus group scales and zeros.

    A group of ``group_size`` weights carries a 16-bit scale and a packed k-bit zero point, so int4 with
    groups of 128 costs 0.5 + 2.5/128 = 0.52 bytes a weight.
    """
    if quant is None or quant.bits >= 16:
        return act_bytes
    per = quant.bits / 8
    if quant.group_size:
        per += (2 + quant.bits / 8) / quant.group_size
    return per


def weight_bytes(params: ParamCount, act_bytes: float, quant: Quantization | None = None) -> int:
    linear = params.linear * linear_bytes_per_param(quant, act_bytes)
    return math.ceil(linear + params.unquantized * act_bytes)


def kv_heads_per_rank(s: ModelShape, tp: int = 1) -> int:
    """KV heads one tensor-parallel rank holds (replicated when fewer heads than ranks)."""
    return max(1, math.ceil(s.num_kv_heads / tp))


def kv_bytes_per_token(s: ModelShape, kv_bytes: float, tp: int = 1) -> int:
    """2 (K and V) x layers x KV heads x head dim x KV dtype bytes, for one rank."""
    return math.ceil(2 * s.num_layers * kv_heads_per_rank(s, tp) * s.head_dim * kv_bytes)


def default_max_num_seqs(device_bytes: int) -> int:
    """vLLM's default for the OpenAI server: 1024 on cards of 70 GiB or more (except A100), else 256."""
    return 1024 if device_bytes >= 70 * GIB else 256


@dataclass(frozen=True)
class RuntimeProfile:
    """The fitted in-budget non-KV term (see the module docstring)."""

    base_bytes: int = IN_BUDGET_BASE_BYTES
    logits_bytes_per_element: int = LOGITS_BYTES_PER_ELEMENT

    def in_budget_other(self, vocab_size: int, max_num_seqs: int) -> int:
        return self.base_bytes + max_num_seqs * vocab_size * self.logits_bytes_per_element


def kv_cache_bytes(budget: float, device_bytes: int, weights: int, other: int) -> int:
    """What vLLM leaves for the KV cache (negative: the budget does not even hold the weights)."""
    return math.floor(budget * device_bytes) - weights - other


def kv_tokens(kv_bytes: int, per_token: int, block_size: int = GPU_BLOCK_SIZE) -> int:
    """Tokens in whole blocks, as vLLM allocates them."""
    if kv_bytes <= 0:
        return 0
    return (kv_bytes // (per_token * block_size)) * block_size


def round_up_tokens(tokens: int, block_size: int = GPU_BLOCK_SIZE) -> int:
    return -(-tokens // block_size) * block_size


def budget_needed(weights: int, other: int, kv_bytes_wanted: int, device_bytes: int) -> float:
    """The smallest budget (on the BUDGET_STEP grid) whose KV cache holds ``kv_bytes_wanted``."""
    return ceil_step((weights + other + kv_bytes_wanted) / device_bytes)


def used_bytes(budget: float, device_bytes: int, reserve: int) -> int:
    """What one process takes from the device: its budget plus the reserve outside it."""
    return math.floor(budget * device_bytes) + reserve


def ceil_step(x: float, step: float = BUDGET_STEP) -> float:
    return round(math.ceil(round(x / step, 9)) * step, 6)


def floor_step(x: float, step: float = BUDGET_STEP) -> float:
    return round(math.floor(round(x / step, 9)) * step, 6)


def split_budgets(needs: Sequence[float], shares: Sequence[float], available: float) -> list[float] | None:
    """Give each process its need plus a part of what is left of ``available``, by ``shares``.

    ``available`` is the budget sum the processes may take (a fraction of the device). Returns None when
    the needs alone exceed it. Budgets are rounded down to the BUDGET_STEP grid, never below the need.
    """
    room = available - sum(needs)
    if room < -1e-9:
        return None
    total_share = sum(shares)
    out = []
    for need, share in zip(needs, shares, strict=True):
        extra = room * share / total_share if total_share > 0 else room / len(needs)
        out.append(max(need, floor_step(need + extra)))
    return out


def rule_of_thumb_gb(params: int, bits: float) -> float:
    """The seed documents' rule, memory GB = params in billions x (2 + 8/k), read with k = weight bits."""
    return params / GB * (2 + 8 / bits)
