"""What a replica's own signals say of its progress, the evidence a stalled stream moves on.

:class:`Progress` is fed by the monitor (gateway/replicas/monitor.py): each ``/metrics`` scrape's
progress mark (llmgw_contract/vllm_metrics.py ``progress_mark``: vLLM's token and request counters, its batch
and cache gauges) and each failed probe or scrape. :class:`Gaps` is fed by the streams read from the
replica (gateway/migration/stream.py): the time between its tokens. A stream that waits for a token
longer than the bound learned from the gaps moves only when :meth:`Progress.quiet_since` says the
replica itself made no progress either: a CPU replica prefilling other clients' long prompts is slow
between tokens, its counters advance, and its streams stay where they are.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

GAP_WINDOW = 256
"""How many of a replica's most recent gaps between tokens the stall bound is learned from."""


@dataclass(slots=True)
class Progress:
    """The replica's progress as its own signals show it; times are ``time.perf_counter()``."""

    mark: tuple[float, ...] = ()
    """The last scrape's progress mark."""
    advanced_at: float = 0.0
    """When a scrape last saw the mark change."""
    scraped_at: float = 0.0
    """When a scrape last succeeded."""
    silent_at: float = 0.0
    """When a health probe or a scrape last failed (no answer, or too late)."""

    def scraped(self, mark: tuple[float, ...], now: float) -> None:
        if mark != self.mark:
            self.mark, self.advanced_at = mark, now
        self.scraped_at = now

    def failed(self, now: float) -> None:
        self.silent_at = now

    def quiet_since(self, since: float, bound: float) -> bool:
        """True when the replica shows no progress from ``since`` on: counted from ``since`` or from its
        last advance after it, a probe failed since, or its scrapes saw nothing advance for ``bound``."""
        quiet_from = max(since, self.advanced_at)
        return self.silent_at > quiet_from or self.scraped_at - quiet_from >= bound


@dataclass(slots=True)
class Gaps:
    """The replica's most recent gaps between tokens (over all the streams read from it)."""

    window: deque[float] = field(default_factory=lambda: deque(maxlen=GAP_WINDOW))

    def add(self, gap: float) -> None:
        self.window.append(gap)

    def p99(self) -> float:
        """The 99th percentile of the window (0 while empty)."""
        if not self.window:
            return 0.0
        ranked = sorted(self.window)
        return ranked[min(len(ranked) - 1, int(len(ranked) * 0.99))]

    def bound(self, floor: float, factor: float) -> float:
        """The stall bound: ``factor`` × the p99 gap, never under ``floor``."""
        return max(floor, factor * self.p99())
