"""Passive ejection with exponential back-off; the monitor's half-open probe brings a replica back."""

from __future__ import annotations

from dataclasses import dataclass, field

from contract.backoff import Backoff
from gateway.replicas.table import Endpoint


@dataclass(frozen=True, slots=True)
class Ejection:
    backoff: Backoff = field(default_factory=Backoff)

    def fail(self, ep: Endpoint, now: float) -> bool:
        """Record a failure (connection error, timeout, 5xx). True when this newly ejects the replica."""
        newly = ep.failures == 0
        ep.failures += 1
        ep.ejected_until = now + self.backoff.delay(ep.failures)
        return newly

    def succeed(self, ep: Endpoint) -> None:
        ep.failures = 0
        ep.ejected_until = 0.0

    @staticmethod
    def probe_due(ep: Endpoint, now: float) -> bool:
        """An ejected replica whose back-off has run out gets one half-open probe."""
        return ep.failures > 0 and ep.ejected_until <= now
