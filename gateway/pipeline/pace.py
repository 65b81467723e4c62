"""The client side's minimum relay rate: whether a stream's client takes its bytes fast enough.

A client that stops reading is cut by the relay's write timeout (a send held that long by flow
control). One that reads a little just before each timeout would hold its slot for the whole
generation; :class:`ClientPace` catches it: over each window of ``window_s``, when the relay waited
for the client (its sends held) at least half the window, the client must have taken ``min_rate``
bytes a second. While the client is the bottleneck every buffer between them is full, so what the
relay sent in the window is what the client took. A stream slow at its source (the replica) does not
wait for the client and is never judged.
"""

from __future__ import annotations


class SlowClient(Exception):
    """The client took less than the minimum rate over a window in which the stream waited for it."""

    def __init__(self, rate: float) -> None:
        super().__init__(f"{rate:.0f} bytes/s")
        self.rate = rate


class ClientPace:
    """One stream's windows; :meth:`sent` after each send."""

    __slots__ = ("bytes", "min_rate", "start", "waited", "window_s")

    def __init__(self, window_s: float, min_rate: int, now: float) -> None:
        self.window_s, self.min_rate = window_s, min_rate
        self.start, self.bytes, self.waited = now, 0, 0.0

    def sent(self, size: int, waited_s: float, now: float) -> None:
        """Count a send of ``size`` bytes that waited ``waited_s`` for the client; raises SlowClient
        when a window ends with the client too slow."""
        self.bytes += size
        self.waited += waited_s
        span = now - self.start
        if span < self.window_s:
            return
        rate = self.bytes / span
        slow = self.min_rate > 0 and self.waited >= span / 2 and rate < self.min_rate
        self.start, self.bytes, self.waited = now, 0, 0.0
        if slow:
            raise SlowClient(rate)
