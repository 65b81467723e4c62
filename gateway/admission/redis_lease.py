"""A slot held in the shared Redis queue (gateway/admission/redis_queue.py), released exactly once."""

from __future__ import annotations

from typing import Protocol


class LeaseOwner(Protocol):
    async def release(self, model: str, lease_id: str) -> None: ...

    def refund(self, model: str, tenant: str, tokens: int) -> None: ...


class RedisLease:
    """A slot held in Redis; released exactly once, even when the releasing task is cancelled.

    ``tagged`` is the cost the request was queued with, charged to its tenant's fair-share finish tag
    (0 when it was granted without queueing: no tag was charged); :meth:`refund` gives back up to that."""

    __slots__ = ("_id", "_model", "_owner", "_released", "_tagged", "_tenant")

    def __init__(
        self, owner: LeaseOwner, model: str, lease_id: str, tenant: str = "", tagged: int = 0
    ) -> None:
        self._owner, self._model, self._id = owner, model, lease_id
        self._tenant, self._tagged = tenant, tagged
        self._released = False

    @property
    def id(self) -> str:
        return self._id

    async def release(self) -> None:
        if not self._released:
            self._released = True
            await self._owner.release(self._model, self._id)

    async def refund(self, tokens: int) -> None:
        """The request used ``tokens`` fewer than it was queued with: its tenant's tag gives them back
        (at most what was charged to it, once; in the background, like the release)."""
        back, self._tagged = min(max(0, tokens), self._tagged), 0
        if back:
            self._owner.refund(self._model, self._tenant, back)
