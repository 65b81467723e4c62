"""Passive ejection with exponential back-off; the monitor's half-open probe brings a replica back.

Evidence before action: an ejection takes a replica out of new picks only. The requests in flight there
are told (its watchers) only on evidence about their work: the registry says its process is gone
(gateway/replicas/table.py), or it failed ``lost_after`` health probes in a row (:meth:`probe_failed`).
A request's own broken connection is its own evidence (gateway/pipeline/forward.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.replicas.table import Endpoint
from llmgw_contract.backoff import Backoff


@dataclass(frozen=True, slots=True)
class Ejection:
    backoff: Backoff = field(default_factory=Backoff)
    after: int = 3
    """How many server errors in a row a replica answers before it is ejected (``LLMGW_EJECT_AFTER``)."""
    lost_after: int = 3
    """How many health probes in a row a replica fails before the requests in flight there are told
    (``LLMGW_LOST_AFTER_PROBES``)."""

    def strike(self, ep: Endpoint, now: float) -> bool:
        """Record a server error the replica answered; it is ejected on the ``after``-th in a row.
        True when this newly ejects the replica."""
        ep.strikes += 1
        return ep.strikes >= self.after and self.fail(ep, now)

    def fail(self, ep: Endpoint, now: float) -> bool:
        """Record a failure that ejects at once (connection error, timeout, failed health check): out of
        new picks for its back-off; nobody in flight there is told. True when this newly ejects it."""
        newly = ep.failures == 0
        ep.failures += 1
        ep.ejected_until = now + self.backoff.delay(ep.failures)
        return newly

    def probe_failed(self, ep: Endpoint, now: float) -> tuple[bool, bool]:
        """A failed health probe: ejected (:meth:`fail`); on the ``lost_after``-th in a row the requests
        in flight there are told. (newly ejected, newly lost)."""
        ep.probe_failures += 1
        lost = ep.probe_failures == self.lost_after
        newly = self.fail(ep, now)
        if lost:
            ep.gone()
        return newly, lost

    def succeed(self, ep: Endpoint) -> None:
        """It answered (a probe or a request): back into picks, every run forgotten."""
        ep.failures = ep.strikes = ep.probe_failures = 0
        ep.ejected_until = 0.0

    @staticmethod
    def probe_due(ep: Endpoint, now: float) -> bool:
        """An ejected replica whose back-off has run out gets one half-open probe."""
        return ep.failures > 0 and ep.ejected_until <= now
