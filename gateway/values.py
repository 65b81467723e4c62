"""The values every step of the request path shares: who calls (:class:`Caller`), what the request may
cost in tokens (:class:`Asked`, :class:`TokenCost`, :class:`Charge`), what a routing policy may know of
it (:class:`RouteRequest`), whether a generation may move mid-way (:class:`MigrationPlan`), and the
small object a request carries through the steps (:class:`RequestContext`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.endpoints import ROUTES, Route
from gateway.errors import GatewayError
from gateway.replicas.table import Endpoint
from llmgw_contract.fleet import Model

FLOW = "llmgw.flow"
"""The scope key of the server's write flow control (``write_paused``: the client is not reading)."""
ABORT = "llmgw.abort"
"""The scope key of a callable that drops the client's connection at once (unsent bytes too)."""
GONE = "llmgw.gone"
"""The ASGI scope key under which the server (gateway/edge/one_write.py) puts a future resolved when
the client's connection is lost."""


@dataclass(frozen=True, slots=True)
class Asked:
    """What the body asks to generate: a per-sequence limit (None: up to the context) and sequences."""

    max_tokens: int | None = None
    sequences: int = 1


@dataclass(frozen=True, slots=True)
class TokenCost:
    """A request's reservation: its prompt estimate and the most it may generate."""

    prompt: int = 0
    output: int = 0
    explicit: bool = True

    @property
    def reserved(self) -> int:
        return self.prompt + self.output


@dataclass(frozen=True, slots=True)
class Charge:
    """Tokens charged against a key's per-minute limit, the window (minute) they were charged in, and the
    ``x-ratelimit-*`` headers of the key's limits for the answer."""

    window: int
    tokens: int
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What a policy may know of a request."""

    prefix_key: bytes = b""
    session_key: str | None = None
    chain: tuple[str, ...] = ()
    """The prompt's prefix chain (:mod:`gateway.routing.prefix.chain`), for the shared prefix index."""
    detour: bool = False
    """A pick away from the replica the request was sent to (a retry, a migration): the shared prefix
    index places nothing for it (:class:`gateway.routing.prefix.index.PickInput`)."""


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
class MigrationPlan:
    """Whether a streamed request may move (``reason`` says why not) and what the seam needs."""

    payload: dict[str, Any]
    reason: str = ""
    chat: bool = True
    keep_ids: bool = False
    usage: bool = False
    attempts: int = 2
    whole: bool = False
    """The client asked a non-streamed answer. Movable (no ``reason``): sent as a stream with token ids,
    continued token-exact like a stream and answered whole (gateway/migration/whole.py, assemble.py).
    Not movable: sent as it is; if its replica fails, it runs again whole on another one (the client has
    seen nothing yet)."""

    @property
    def runs_again(self) -> bool:
        """A non-streamed request that cannot move: run again whole when its replica fails."""
        return self.whole and bool(self.reason)


@dataclass(slots=True)
class Progress:
    """What serving a request has done so far, changed by its admission, each attempt, a move and a run
    again (the request as parsed stays in :class:`RequestContext`)."""

    upstream_id: str = ""
    """The replica's request id: the client's (or the gateway's), ``-moveN``/``-rerunN`` after a move."""
    woken_at: float | None = None
    """When an on-demand request began to wait for its wake (set once granted during a wake)."""
    wait_s: float = 0.0
    deadline: float = 0.0
    replica: Endpoint | None = None
    attempts: int = 0
    status: int = 0
    reply_type: str = "application/json"
    """The content type of the replica's answer."""
    first_byte_at: float | None = None
    error: str = ""
    upstream_error: GatewayError | None = None
    on_gone: Callable[[], None] | None = None
    """Called if the replica whose answer is awaited leaves the registry or is ejected (a non-streamed
    generation that may run again elsewhere: gateway/pipeline/migrate.py)."""


@dataclass(slots=True)
class RequestContext:
    request_id: str
    endpoint: str
    body: bytes
    headers: dict[str, str]
    started: float
    caller: Caller = Caller()  # (frozen values: one shared default, none made per request)
    model_name: str = ""
    stream: bool = False
    strip_usage: bool = False
    """The usage event of this stream is the gateway's own ask: it is taken out of the client's stream."""
    asked: Asked = Asked()
    cost: TokenCost = TokenCost()
    charge: Charge | None = None
    route: RouteRequest = RouteRequest()
    model: Model | None = None
    api: Route = ROUTES[0]
    response_id: str = ""
    content_type: str = "application/json"
    pinned: tuple[str, str] | None = None
    """(replica id, instance) that must serve the request: the holder of a stored response."""
    media: Sequence[str] = ()
    """The request's media URLs (images, audio, video, files), checked before it is forwarded."""
    holders: frozenset[tuple[str, str]] | None = None
    """(replica id, instance) of the replicas that loaded the requested runtime LoRA adapter: the only
    ones that may serve it (None: not an adapter request)."""
    calls_tools: bool = False
    """The request offers tools the model may call (pipeline/parse.py ``calls_tools``)."""
    query: bytes = b""
    """The request's query string (only a path without a body reads it: its ``model``)."""
    payload: dict[str, Any] | None = None
    """The JSON body as the parse step read it (None: a form or no body)."""
    path_model: str = ""
    """The model a per-model base path names (``/models/{model}/tokenize``; gateway/endpoints.py)."""
    migration: MigrationPlan | None = None
    """A generation that may move to another replica mid-way (gateway/migration/)."""
    traceparent: str = ""
    """W3C trace context for the replica: the client's, or a new one (gateway/tracing.py)."""
    tracestate: str = ""
    span: Span | None = None
    """The request's root span while tracing is on."""
    progress: Progress = field(default_factory=Progress)
    """What serving it has done so far (the fields above are the request as it was parsed)."""

    @property
    def upstream_path(self) -> bytes:
        """The replica's path: the same as the client's (with the response id filled in)."""
        return self.api.path.replace("{response_id}", self.response_id).encode()

    @property
    def model_label(self) -> str:
        return self.model.name if self.model is not None else "unknown"
