"""The residency benchmark's plot: each model's state over the trace, one panel per policy (matplotlib,
already in the project's environment)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol


class Arrival(Protocol):
    model: str
    arrived: float


class Timeline(Protocol):
    """What the plot reads: a simulated :class:`bench.residency.device.Device` or the live replay's
    :class:`bench.residency.stack.Observed`."""

    @property
    def slots(self) -> Mapping[str, object]: ...
    @property
    def timeline(self) -> Sequence[tuple[float, str, str]]: ...
    @property
    def served(self) -> Sequence[Arrival]: ...


COLORS = {"awake": "#2e7d32", "asleep1": "#90caf9", "asleep2": "#1565c0", "stopped": "#bdbdbd"}
MOVING = "#ff9800"


def spans(dev: Timeline, end_s: float) -> dict[str, list[tuple[float, float, str]]]:
    """Per model: (start, length, color) of each state or move in the device's timeline."""
    out: dict[str, list[tuple[float, float, str]]] = {}
    last: dict[str, tuple[float, str]] = {}
    ended = [(t, m, s) for t, m, s in dev.timeline if t < end_s] + [(end_s, m, "") for m in dev.slots]
    for t, model, label in ended:
        if model in last:
            start, prev = last[model]
            color = MOVING if "->" in prev else COLORS[prev]
            out.setdefault(model, []).append((start, t - start, color))
        last[model] = (t, label)
    return out


def plot(devs: Mapping[str, Timeline], end_s: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    shown = [(name, dev) for name, dev in devs.items() if name != "all awake"]
    fig, axes = plt.subplots(len(shown), 1, figsize=(12, 2.2 * len(shown)), sharex=True)
    for ax, (name, dev) in zip(axes, shown, strict=True):
        for row, (model, bars) in enumerate(sorted(spans(dev, end_s).items())):
            ax.broken_barh([(a, w) for a, w, _ in bars], (row - 0.4, 0.8), facecolors=[c for _, _, c in bars])
            arrivals = [s.arrived for s in dev.served if s.model == model]
            ax.plot(arrivals, [row] * len(arrivals), "|", color="black", markersize=4)
        ax.set_yticks(range(len(dev.slots)), sorted(dev.slots))
        ax.set_title(name, fontsize=10, loc="left")
    axes[-1].set_xlabel("trace seconds (| a request)")
    legend = [Patch(color=c, label=s) for s, c in COLORS.items()] + [Patch(color=MOVING, label="moving")]
    fig.legend(handles=legend, loc="upper right", ncol=5, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=90)
    plt.close(fig)
