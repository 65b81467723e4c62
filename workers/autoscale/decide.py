"""One model's scaling decisions on one host (pure: no I/O, the clock passed in).

:class:`ModelScaler` wraps the rule's arithmetic (:class:`llmgw_contract.scaling.Autoscale`) with what it
must remember between ticks: when the demand last needed the current count. Up: at once to what the
demand needs, as far as the next replica fits (``fits``); a request waiting while the model has no
replica counts as one. Down: one replica at a time, ``scale_down_delay_s`` after the demand last needed
the current count, and the delay starts again after each step (a model whose demand returns within it
keeps its replicas). The replica that goes is the idlest (:func:`idlest`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llmgw_contract.scaling import Autoscale, ScalingRule


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do now for one model."""

    desired: int
    """The count the demand and the rule ask for (the gauge)."""
    start: int = 0
    """Replicas to start now."""
    remove: str | None = None
    """The replica to drain and retire now (one at a time)."""
    refused: bool = False
    """The demand asks for more replicas than start now: the next one does not fit."""


def idlest(inflight: Mapping[str, int], replicas: Sequence[str]) -> str:
    """The replica of ``replicas`` with the fewest requests in flight; on a tie the last one listed."""
    return min(reversed(replicas), key=lambda rid: inflight.get(rid, 0))


class ModelScaler:
    """Desired replicas of one model over time (see the module doc)."""

    def __init__(self, rule: ScalingRule) -> None:
        self.auto = Autoscale(rule)
        self.last_busy_s: float | None = None

    @property
    def rule(self) -> ScalingRule:
        return self.auto.rule

    def decide(
        self,
        demand: float,
        waiting_at_zero: bool,
        replicas: Sequence[str],
        inflight: Mapping[str, int],
        now_s: float,
        fits: bool = True,
    ) -> Decision:
        """The decision for ``replicas`` (the ids listed now, oldest first) under ``demand`` (in flight +
        queued); ``inflight``: requests in flight per replica id; ``fits``: whether one more replica fits
        the host's memory and devices."""
        if waiting_at_zero:
            demand = max(demand, 1.0)
        current = len(replicas)
        if self.last_busy_s is None or self.auto.busy(demand, current):
            self.last_busy_s = now_s
        desired = self.auto.desired(demand, current, self.last_busy_s, now_s)
        if desired > current:
            return Decision(desired, desired - current if fits else 0, refused=not fits)
        if desired < current:
            self.last_busy_s = now_s  # the delay starts again for the next step down
            return Decision(desired, remove=idlest(inflight, replicas))
        return Decision(desired)
