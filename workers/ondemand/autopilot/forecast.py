"""A model's predicted demand (requests/s) from its recent rates: an exponentially weighted average that
weighs the newest window most, raised by the requests waiting for it now."""

from __future__ import annotations

from collections.abc import Sequence

WAITING_BONUS = 1000.0
"""A model with requests waiting outranks any prediction: they wait now."""


def ewma(rates: Sequence[float], alpha: float) -> float:
    """The average of ``rates`` (oldest first), each newer window weighing ``alpha`` of the total."""
    out = 0.0
    for i, r in enumerate(rates):
        out = r if i == 0 else out + alpha * (r - out)
    return out


def predicted(rates: Sequence[float], queued: int, alpha: float = 0.5) -> float:
    """The model's predicted demand: the average of its rates, plus :data:`WAITING_BONUS` per request
    waiting."""
    return ewma(rates, alpha) + WAITING_BONUS * queued
