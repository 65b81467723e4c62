"""Admission switched off (LLMGW_ADMISSION=false): every request runs at once, nothing is counted."""

from __future__ import annotations

from gateway.admission.base import Ticket


class NoLease:
    async def release(self) -> None:
        return None

    async def refund(self, tokens: int) -> None:
        return None


class OpenAdmission:
    waits = False

    async def acquire(self, ticket: Ticket, capacity: int) -> tuple[NoLease, float]:
        return NoLease(), 0.0

    async def resize(self, model: str, capacity: int) -> None:
        return None

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    @property
    def degraded(self) -> bool:
        return False
