"""The routing benchmark's picture (``bench/results/routing.png``): hit rate against balance, and TTFT.

One column per workload. Top: each policy's prefix-cache hit rate as a percentage of the single
replica's (y) against its hot-spot factor (x: replicas × the busiest replica's share, 1.0 is even), one
marker per gateway count, with the targets drawn (98 % of ideal; a share of 57.5 % is a hot-spot factor of
1.15 on two replicas). Top-left is best. Bottom: TTFT p90 per policy as bars (one per gateway count),
p50 as a dot on each bar. Drawn from the results file that :mod:`bench.routing` writes, so a run's
picture can be redrawn later (``python -m bench.routing --plot-only bench/results/routing.json``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

IDEAL = "single_replica"
WORKLOAD_ORDER = ("conversations", "templates", "prefix_repetition")
TITLES = {
    "conversations": "conversations (multi-turn)",
    "templates": "templates (shared documents)",
    "prefix_repetition": "vllm bench serve prefix_repetition\n(Poisson arrivals)",
}
MARKERS = ("o", "s", "^", "D")
TARGET_VS_IDEAL = 98.0
TARGET_MAX_SHARE = 0.575


def workloads_of(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The workloads present, in the benchmark's order (unknown ones last)."""
    present = {r["workload"] for r in rows}
    return [w for w in WORKLOAD_ORDER if w in present] + sorted(present - set(WORKLOAD_ORDER))


def hotspot(shares: Sequence[float | None]) -> float | None:
    known = [s for s in shares if s is not None]
    return len(shares) * max(known) if known else None


def policies_of(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Policy labels in first-seen order, the single replica last."""
    seen: list[str] = []
    for r in rows:
        if r["policy"] not in seen:
            seen.append(r["policy"])
    return [p for p in seen if p != IDEAL] + ([IDEAL] if IDEAL in seen else [])


def draw(document: dict[str, Any], out: Path) -> Path:
    """Draw ``document`` (a routing results file, parsed) as a PNG at ``out``; returns ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows: list[dict[str, Any]] = document["results"]
    workloads = workloads_of(rows)
    policies = policies_of(rows)
    gateway_counts = sorted({int(r.get("gateways", 2)) for r in rows if r["policy"] != IDEAL})
    colours = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(policies)}
    replicas = max((len(r["shares"]) for r in rows), default=2)
    fig, axes = plt.subplots(2, len(workloads), figsize=(5.6 * len(workloads), 9.5), squeeze=False)
    for col, workload in enumerate(workloads):
        mine = [r for r in rows if r["workload"] == workload]
        scatter(axes[0][col], mine, colours, gateway_counts, replicas)
        bars(axes[1][col], mine, policies, colours, gateway_counts)
        axes[0][col].set_title(TITLES.get(workload, workload), fontsize=10)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8, frameon=False)
    setup = document.get("setup", {})
    fig.suptitle(
        f"Routing on {replicas} CPU vLLM replicas behind {setup.get('gateways', 'gateways behind nginx')}",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def scatter(
    ax: Any, rows: Sequence[dict[str, Any]], colours: dict[str, Any], counts: Sequence[int], replicas: int
) -> None:
    """Hit rate (% of ideal) against the hot-spot factor, one point per policy and gateway count."""
    for r in rows:
        x, y = hotspot(r["shares"]), r.get("vs_ideal")
        if x is None or y is None or r["policy"] == IDEAL:
            continue
        g = int(r.get("gateways", 2))
        marker = MARKERS[counts.index(g) % len(MARKERS)] if g in counts else "x"
        ax.scatter(
            x, y * 100, s=60, marker=marker, color=colours[r["policy"]], label=f"{r['policy']}, {g} gw"
        )
    ax.axhline(TARGET_VS_IDEAL, color="grey", ls="--", lw=0.8)
    ax.axvline(replicas * TARGET_MAX_SHARE, color="grey", ls=":", lw=0.8)
    ax.set_xlabel("hot-spot factor (replicas × busiest share; 1 = even)", fontsize=8)
    ax.set_ylabel("prefix-cache hit rate, % of single replica", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)


def bars(
    ax: Any,
    rows: Sequence[dict[str, Any]],
    policies: Sequence[str],
    colours: dict[str, Any],
    counts: Sequence[int],
) -> None:
    """TTFT p90 bars (hatched for the second gateway count onwards), p50 as a black dot."""
    width = 0.8 / max(len(counts), 1)
    for i, policy in enumerate(policies):
        for j, g in enumerate(counts):
            if policy == IDEAL:  # one run, drawn once in the middle
                r = next((x for x in rows if x["policy"] == policy), None) if j == 0 else None
                x = float(i)
            else:
                r = next((x for x in rows if x["policy"] == policy and int(x.get("gateways", 2)) == g), None)
                x = i + (j - (len(counts) - 1) / 2) * width
            if r is None or r.get("ttft_p90_ms") is None:
                continue
            ax.bar(x, r["ttft_p90_ms"], width * 0.95, color=colours[policy], hatch="//" if j else None)
            if r.get("ttft_p50_ms") is not None:
                ax.plot(x, r["ttft_p50_ms"], "o", color="black", ms=3)
    ax.set_xticks(range(len(policies)))
    ax.set_xticklabels(policies, rotation=30, ha="right", fontsize=7)
    gw = ", ".join(f"{g} gw{' hatched' if j else ''}" for j, g in enumerate(counts))
    ax.set_ylabel(f"TTFT p90 ms (bars: {gw}); p50 dots", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(axis="y", alpha=0.3)
