"""The small object a request carries through the named steps of the request path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from contract.fleet import Model
from gateway.endpoints import ROUTES, Route
from gateway.errors import GatewayError
from gateway.pool import Endpoint
from gateway.routing.base import RouteRequest
from gateway.steps.tokens import Asked, Charge, TokenCost

if TYPE_CHECKING:
    from opentelemetry.trace import Span


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: the tenant behind the API key (or the anonymous tenant)."""

    tenant: str = "anonymous"
    key_id: str = ""
    priority: int = 0
    allowed_models: frozenset[str] | None = None
    max_wait_s: float | None = None

    def may_use(self, model: str) -> bool:
        return self.allowed_models is None or model in self.allowed_models


@dataclass(slots=True)
class RequestContext:
    request_id: str
    endpoint: str
    body: bytes
    headers: dict[str, str]
    started: float
    caller: Caller = field(default_factory=Caller)
    upstream_id: str = ""
    model_name: str = ""
    stream: bool = False
    strip_usage: bool = False
    """The usage event of this stream is the gateway's own ask: it is taken out of the client's stream."""
    asked: Asked = field(default_factory=Asked)
    cost: TokenCost = field(default_factory=TokenCost)
    charge: Charge | None = None
    route: RouteRequest = field(default_factory=RouteRequest)
    model: Model | None = None
    replica: Endpoint | None = None
    attempts: int = 0
    status: int = 0
    first_byte_at: float | None = None
    wait_s: float = 0.0
    deadline: float = 0.0
    error: str = ""
    upstream_error: GatewayError | None = None
    api: Route = ROUTES[0]
    response_id: str = ""
    content_type: str = "application/json"
    pinned: tuple[str, str] | None = None
    """(replica id, instance) that must serve the request: the holder of a stored response."""
    preferred: frozenset[str] = frozenset()
    """Replica ids to prefer when they are ready (those with the requested LoRA adapter loaded)."""
    traceparent: str = ""
    """W3C trace context for the replica: the client's, or a new one (gateway/tracing.py)."""
    tracestate: str = ""
    span: Span | None = None
    """The request's root span while tracing is on."""

    @property
    def upstream_path(self) -> bytes:
        """The replica's path: the same as the client's (with the response id filled in)."""
        return self.api.path.replace("{response_id}", self.response_id).encode()

    @property
    def model_label(self) -> str:
        return self.model.name if self.model is not None else "unknown"
