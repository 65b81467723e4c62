"""Passive ejection with exponential back-off; the monitor's half-open probe brings a replica back."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.pool import Endpoint


@dataclass(frozen=True, slots=True)
class Ejection:
    base_s: float = 1.0
    max_s: float = 30.0

    def backoff(self, failures: int) -> float:
        return min(self.max_s, self.base_s * 2.0 ** max(0, failures - 1))

    def fail(self, ep: Endpoint, now: float) -> bool:
        """Record a failure (connection error, timeout, 5xx). True when this newly ejects the replica."""
        newly = ep.failures == 0
        ep.failures += 1
        ep.ejected_until = now + self.backoff(ep.failures)
        return newly

    def succeed(self, ep: Endpoint) -> None:
        ep.failures = 0
        ep.ejected_until = 0.0

    @staticmethod
    def probe_due(ep: Endpoint, now: float) -> bool:
        """An ejected replica whose back-off has run out gets one half-open probe."""
        return ep.failures > 0 and ep.ejected_until <= now
