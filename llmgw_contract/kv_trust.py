"""Whether a managing agent trusts a replica's KV-event stream, and when it checks (pure: no I/O, the caller
passes the time and what happened).

vLLM's publisher is PUB/SUB: a subscriber learns of a closed connection (the ZMQ monitor), not of a
publisher that stopped sending while its connection stays up (the process frozen, the socket black-holed,
the publishing thread stuck). vLLM serves its replay endpoint from the thread that publishes, so a replay
request answered to its end proves the publisher alive, and brings whatever the subscription missed. The
agent sends one after ``probe_s`` without a batch; a stream whose replay stays unanswered ``silent_s`` is
*silent*: its replica's entries are reset and it is approximate until a replay is answered again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXACT, APPROXIMATE = "exact", "approximate"


@dataclass(frozen=True, slots=True)
class FeedTiming:
    probe_s: float = 1.0
    """Seconds without a batch after which the agent asks the replay endpoint (an idle replica: one small
    request a second)."""
    silent_s: float = 5.0
    """Seconds a replay may take to answer; unanswered: the stream is silent."""


@dataclass(slots=True)
class StreamTrust:
    """One replica's stream: exact while connected, caught up and not silent."""

    timing: FeedTiming = field(default_factory=FeedTiming)
    connected: bool = False
    silent: bool = False
    heard: float = 0.0
    """When the stream last showed it was alive: a batch, or a replay answered."""

    @property
    def mode(self) -> str:
        return EXACT if self.connected and not self.silent else APPROXIMATE

    def batch(self, now: float) -> None:
        self.heard = now

    def probe_due(self, now: float) -> bool:
        """Time to ask the replay endpoint: connected, trusted, and no sign of life for ``probe_s``."""
        return self.connected and not self.silent and now - self.heard >= self.timing.probe_s

    def caught_up(self, now: float) -> bool:
        """A replay answered to its end (on connecting, on a probe): connected and trusted again; True when
        this ends a silence."""
        ended = self.silent
        self.connected, self.silent, self.heard = True, False, now
        return ended

    def unanswered(self) -> bool:
        """A replay went unanswered: silent; True when this starts the silence (reset, log and count once)."""
        began = not self.silent
        self.silent = True
        return began

    def disconnected(self) -> None:
        self.connected = False
