"""The lent H200's recorded numbers for one Llama-2-7B-shaped bf16 model at ``--gpu-memory-utilization
0.30`` (/work/shared/gpu/sleep-mode.md, measured 2026-12-03): memory per state and the first token of a
woken model. The move timings are the autopilot's seed, :data:`workers.ondemand.autopilot.costs.H200_SECONDS`.
Numbers not measured there are the benchmark's parameters, named as such where they are used."""

from __future__ import annotations

from workers.ondemand.autopilot.snapshot import Footprint

MIB, GIB = 1 << 20, 1 << 30
CARD_BYTES = 143_771 * MIB
"""The card's memory as vLLM reported it."""
H200_7B = Footprint(awake=44_207 * MIB, asleep1=1_601 * MIB, asleep2=1_565 * MIB, host1=int(13.04 * GIB))
"""Awake (budget 0.30 of the card); left on the GPU asleep at level 1 / level 2; backed up in host RAM at
level 1 ("13.04 GiB backed up in CPU")."""
WEIGHTS_BYTES = 13_120 * MIB
"""The real safetensors written for the level-2 run (13,120 MiB)."""
FIRST_TOKEN_S = 0.015
"""A streamed request's first token on an awake model (0.013-0.017 s after a level-1 wake, 0.016-0.021 s
after a level-2 one), without the gateway's own path."""
KV_BYTES_PER_TOKEN = 2 * 32 * 4096 * 2
"""Llama-2-7B's KV cache per token in bf16: K and V, 32 layers, 4096 wide, 2 bytes (the model's shape)."""
