"""Which way an on-demand GPU replica goes to sleep (pure, no I/O): vLLM sleep level 1 or 2, or a stopped
process; and when a measured sleep proves not worth keeping the process for."""

from __future__ import annotations

from typing import Literal

SleepLevel = Literal[0, 1, 2]
"""0: stop the process (what a CPU replica always does); 1 or 2: vLLM's sleep level."""


def choose_level(
    setting: Literal[1, 2, "auto"],
    weights_bytes: int,
    host_budget_bytes: int,
    level1_held_bytes: int,
    reloadable: bool = True,
) -> SleepLevel:
    """The level for one sleep. An explicit ``setting`` is kept. ``auto``: level 1 (weights copied to host
    RAM) while ``weights_bytes`` fit in ``host_budget_bytes`` beside ``level1_held_bytes`` (the weights the
    host's other level-1 sleepers hold); else level 2 (weights dropped, reloaded from disk on wake); else,
    when the weights cannot be reloaded (``load_format: dummy``), 0: the process stops."""
    if setting != "auto":
        return setting
    if weights_bytes + level1_held_bytes <= host_budget_bytes:
        return 1
    return 2 if reloadable else 0


def keeps_most(asleep_bytes: int, awake_bytes: int) -> bool:
    """True when a replica asleep still holds half or more of what it held awake (an embedding model
    whose memory is mostly not weights nor KV cache, say): stopping it gives back more, so it is stopped
    from then on."""
    return awake_bytes > 0 and 2 * asleep_bytes >= awake_bytes
