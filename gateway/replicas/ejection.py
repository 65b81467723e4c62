"""Passive ejection with exponential back-off; the monitor's half-open probe brings a replica back."""

from __future__ import annotations

from dataclasses import dataclass, field

from contract.backoff import Backoff
from gateway.replicas.table import Endpoint


@dataclass(frozen=True, slots=True)
class Ejection:
    backoff: Backoff = field(default_factory=Backoff)
    after: int = 3
    """How many server errors in a row a replica answers before it is ejected (``LLMGW_EJECT_AFTER``)."""

    def strike(self, ep: Endpoint, now: float) -> bool:
        """Record a server error the replica answered; it is ejected on the ``after``-th in a row.
        True when this newly ejects the replica."""
        ep.strikes += 1
        return ep.strikes >= self.after and self.fail(ep, now)

    def fail(self, ep: Endpoint, now: float) -> bool:
        """Record a failure that ejects at once (connection error, timeout, failed health check). True
        when this newly ejects the replica."""
        newly = ep.failures == 0
        ep.failures += 1
        ep.ejected_until = now + self.backoff.delay(ep.failures)
        if newly:
            ep.gone()
        return newly

    def succeed(self, ep: Endpoint) -> None:
        ep.failures = ep.strikes = 0
        ep.ejected_until = 0.0

    @staticmethod
    def probe_due(ep: Endpoint, now: float) -> bool:
        """An ejected replica whose back-off has run out gets one half-open probe."""
        return ep.failures > 0 and ep.ejected_until <= now
