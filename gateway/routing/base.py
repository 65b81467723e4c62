"""The policy interface: pick one endpoint from the candidates, with no-op optional hooks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from gateway.pool import Endpoint


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What a policy may know of a request."""

    prefix_key: bytes = b""
    session_key: str | None = None


@dataclass(frozen=True, slots=True)
class PolicyOptions:
    epsilon: float = 0.25
    seed: int | None = None


class Policy:
    """Chooses one of the ready candidates; never called with an empty sequence."""

    name: ClassVar[str] = ""

    def __init__(self, options: PolicyOptions) -> None:
        self.options = options

    def pick(self, candidates: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        raise NotImplementedError

    def on_start(self, endpoint: Endpoint, request: RouteRequest) -> None:
        """Called when a request is sent to the endpoint (optional hook)."""

    def on_finish(self, endpoint: Endpoint, request: RouteRequest, ok: bool) -> None:
        """Called when that request ends (optional hook)."""
