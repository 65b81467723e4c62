"""The lent H200's recorded numbers for one Llama-2-7B-shaped bf16 model at ``--gpu-memory-utilization
0.30`` (/work/shared/gpu/sleep-mode.md, the runs in bench/gpu/results/sleep/, measured 2026-12-03): memory
per state, the parts of a level-2 wake and the first token of a woken model. The move timings are
:data:`workers.ondemand.autopilot.costs.H200_SECONDS` (the autopilot's seed). One source for the residency
benchmark (bench/residency) and the FAKE GPU ENGINE's ``--profile h200`` (testing/gpu_profile.py)."""

from __future__ import annotations

from workers.ondemand.autopilot.snapshot import Footprint

MIB, GIB = 1 << 20, 1 << 30
CARD_BYTES = 143_771 * MIB
"""The card's memory as vLLM reported it."""
BUDGET = 0.30
"""The ``--gpu-memory-utilization`` the numbers were measured at."""
H200_7B = Footprint(awake=44_207 * MIB, asleep1=1_601 * MIB, asleep2=1_565 * MIB, host1=int(13.04 * GIB))
"""Awake (budget 0.30 of the card); left on the GPU asleep at level 1 / level 2; backed up in host RAM at
level 1 ("13.04 GiB backed up in CPU")."""
WAKE2_WEIGHTS_S = 0.04
"""A level-2 wake's first call, ``POST /wake_up?tags=weights`` (then ``reload_weights``, the rest of
``H200_SECONDS["wake2"]``)."""
WAKE2_KV_S = 0.03
"""Its last call, ``POST /wake_up?tags=kv_cache``."""
FIRST_TOKEN_S = 0.015
"""A streamed request's first token on an awake model (0.013-0.017 s after a level-1 wake, 0.016-0.021 s
after a level-2 one), without the gateway's own path."""
