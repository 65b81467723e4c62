"""Releases that did not reach Redis (its master down, the connection silent), kept to be sent again.

A lease whose release failed would otherwise hold its slot in the shared queue until its TTL ran out
(15 s by default) although nothing runs under it: after a failover every such slot is capacity lost.
The presence beat sends them again once Redis answers; one whose TTL has passed is forgotten (Redis has
dropped it already). Bounded: past ``limit`` the oldest is forgotten (its TTL still frees it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("llmgw.admission")


class Unreleased:
    def __init__(self, ttl_s: float, limit: int = 10_000) -> None:
        self.ttl_s, self.limit = ttl_s, limit
        self._due: dict[tuple[str, str], float] = {}  # (model, lease id) -> when its TTL has passed

    def __len__(self) -> int:
        return len(self._due)

    def failed(self, model: str, lease_id: str, exc: BaseException) -> None:
        """A release that did not reach Redis: said, and kept to be sent again."""
        log.warning(
            "model=%s lease=%s release failed (%s); sent again when Redis answers", model, lease_id, exc
        )
        self.add(model, lease_id)

    def add(self, model: str, lease_id: str) -> None:
        if len(self._due) >= self.limit:
            del self._due[next(iter(self._due))]
        self._due[(model, lease_id)] = time.monotonic() + self.ttl_s

    def pending(self) -> list[tuple[str, str]]:
        """The releases still worth sending, oldest first (those past their TTL are dropped)."""
        now = time.monotonic()
        for key in [k for k, until in self._due.items() if until < now]:
            del self._due[key]
        return list(self._due)

    def sent(self, model: str, lease_id: str) -> None:
        self._due.pop((model, lease_id), None)

    async def resend(
        self, send: Callable[[str, str], Awaitable[None]], errors: tuple[type[BaseException], ...]
    ) -> None:
        """Send the pending releases again; the first that fails with one of ``errors`` ends this round."""
        for model, lease_id in self.pending():
            try:
                await send(model, lease_id)
            except errors:
                return
            self.sent(model, lease_id)
            log.info("model=%s lease=%s released now that Redis answers", model, lease_id)
