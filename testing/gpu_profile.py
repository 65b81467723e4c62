"""What the FAKE GPU ENGINE (testing/fake_gpu_engine.py) is taught with ``--profile``: a measured card's
memory per state and the seconds of each sleep-mode move, read from one source
(:mod:`workers.ondemand.autopilot.h200`, :data:`workers.ondemand.autopilot.costs.H200_SECONDS`; no number
is copied here). ``--time-scale K`` multiplies every wait by K (0.2: a 10-minute trace in 2), so a long
replay runs compressed; the gateway's and the supervisor's own work is not scaled, so it weighs 1/K times
more against the engine's timings than it would on the card."""

from __future__ import annotations

from dataclasses import dataclass

from workers.ondemand.autopilot import h200
from workers.ondemand.autopilot.costs import H200_SECONDS


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """One card's recorded numbers for one model shape at the budget they were measured at."""

    start_s: float
    sleep1_s: float
    sleep2_s: float
    wake1_s: float
    wake2_weights_s: float
    wake2_reload_s: float
    wake2_kv_s: float
    first_token_s: float
    overhead_mib: int
    """Awake MiB beyond ``budget * card`` (what the process held awake minus its budget's share)."""
    asleep1_mib: int
    asleep2_mib: int

    def scaled(self, k: float) -> EngineProfile:
        """Every wait multiplied by ``k`` (memory unchanged)."""
        return EngineProfile(
            self.start_s * k, self.sleep1_s * k, self.sleep2_s * k, self.wake1_s * k,
            self.wake2_weights_s * k, self.wake2_reload_s * k, self.wake2_kv_s * k, self.first_token_s * k,
            self.overhead_mib, self.asleep1_mib, self.asleep2_mib,
        )  # fmt: skip

    def engine_args(self) -> list[str]:
        """The FAKE ENGINE's flags for these waits (testing/fake_engine.py, testing/fake_sleep.py)."""
        waits = {
            "--start-delay-s": self.start_s, "--latency-ms": self.first_token_s * 1000,
            "--sleep1-s": self.sleep1_s, "--sleep2-s": self.sleep2_s, "--wake1-s": self.wake1_s,
            "--wake-weights-s": self.wake2_weights_s, "--reload-s": self.wake2_reload_s,
            "--wake-kv-s": self.wake2_kv_s,
        }  # fmt: skip
        flags = [x for k, v in waits.items() for x in (k, f"{v:.4f}")]
        return [*flags, "--asleep2-mib", str(self.asleep2_mib)]


def h200_7b() -> EngineProfile:
    """The lent H200, one Llama-2-7B-shaped bf16 model (/work/shared/gpu/sleep-mode.md)."""
    mib = h200.MIB
    card_mib = h200.CARD_BYTES // mib
    return EngineProfile(
        start_s=H200_SECONDS["start"], sleep1_s=H200_SECONDS["sleep1"], sleep2_s=H200_SECONDS["sleep2"],
        wake1_s=H200_SECONDS["wake1"], wake2_weights_s=h200.WAKE2_WEIGHTS_S,
        wake2_reload_s=H200_SECONDS["wake2"] - h200.WAKE2_WEIGHTS_S - h200.WAKE2_KV_S,
        wake2_kv_s=h200.WAKE2_KV_S, first_token_s=h200.FIRST_TOKEN_S,
        overhead_mib=h200.H200_7B.awake // mib - round(h200.BUDGET * card_mib),
        asleep1_mib=h200.H200_7B.asleep1 // mib, asleep2_mib=h200.H200_7B.asleep2 // mib,
    )  # fmt: skip


PROFILES = {"h200": h200_7b}
"""``--profile NAME`` -> the profile."""
