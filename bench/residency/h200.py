"""The lent H200's recorded numbers (:mod:`workers.ondemand.autopilot.h200`, the one source the FAKE GPU
ENGINE's ``--profile h200`` reads too) and the benchmark's own model-shape constants. The move timings are
the autopilot's seed, :data:`workers.ondemand.autopilot.costs.H200_SECONDS`. Numbers not measured there are
the benchmark's parameters, named as such where they are used."""

from __future__ import annotations

from workers.ondemand.autopilot.h200 import CARD_BYTES, FIRST_TOKEN_S, GIB, H200_7B, MIB

__all__ = ["CARD_BYTES", "FIRST_TOKEN_S", "GIB", "H200_7B", "KV_BYTES_PER_TOKEN", "MIB", "WEIGHTS_BYTES"]

WEIGHTS_BYTES = 13_120 * MIB
"""The real safetensors written for the level-2 run (13,120 MiB)."""
KV_BYTES_PER_TOKEN = 2 * 32 * 4096 * 2
"""Llama-2-7B's KV cache per token in bf16: K and V, 32 layers, 4096 wide, 2 bytes (the model's shape)."""
