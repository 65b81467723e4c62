"""The authenticator interface, and the open one used when API keys are switched off."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from gateway.values import Caller, Charge, TokenCost

ANONYMOUS = Caller()


class Authenticator(Protocol):
    async def authenticate(self, headers: Mapping[str, str]) -> Caller:
        """The caller behind the request's credentials; raises Unauthorized."""
        ...

    async def charge(self, caller: Caller, model: str, cost: TokenCost) -> Charge | None:
        """Count a request against the caller's rate limits; raises RateLimited. Returns what was
        charged against a token limit, if anything (for :meth:`refund`)."""
        ...

    async def refund(self, caller: Caller, charge: Charge, tokens: int) -> None:
        """Give back tokens of a charge that the request did not use."""
        ...

    def keys_changed(self) -> None:
        """A key changed through this gateway (the admin API): nothing it cached is served again, at once
        (the store's announcement reaches the other gateways, and this one, a moment later)."""
        ...

    async def aclose(self) -> None:
        """Release what the authenticator holds (connections); called once at shutdown."""
        ...


class OpenAuth:
    """Keys switched off: everybody is the anonymous tenant, with no limits."""

    async def authenticate(self, headers: Mapping[str, str]) -> Caller:
        return ANONYMOUS

    async def charge(self, caller: Caller, model: str, cost: TokenCost) -> Charge | None:
        return None

    async def refund(self, caller: Caller, charge: Charge, tokens: int) -> None:
        return None

    def keys_changed(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
