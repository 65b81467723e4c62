"""The policy interface: one pick per request, a plain function over data, with no-op optional hooks.

A pick is :meth:`Policy.route`: a policy that needs shared state (prefix affinity's index) fetches it,
decides and records in at most one call there; every other policy's ``route`` is its pure
:meth:`Policy.pick` over the candidates' live loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from gateway.replicas.table import Endpoint
from gateway.routing.prefix.index import BYTES_PER_TOKEN
from gateway.routing.prefix.shared_index import SharedIndex
from gateway.values import RouteRequest

__all__ = ["Policy", "PolicyOptions", "RouteRequest"]


@dataclass(frozen=True, slots=True)
class PolicyOptions:
    epsilon: float = 0.25
    """The balance bound: of the recent share with the index, of the in-flight load without it."""
    inflight_epsilon: float = 1.0
    """With the index, the looser bound on a holder's in-flight load (a burst guard)."""
    share_window: int = 32
    """With the index, how many of the model's last picks per candidate the share bound counts."""
    seed: int | None = None
    model: str = ""
    index: SharedIndex | None = None
    """The shared prefix index (prefix affinity); None: the rendezvous ranking alone."""
    chunk_bytes: int = 512
    max_chunks: int = 64
    kv_tokens: int = 65536
    """A replica's KV-cache size in tokens when it does not report ``vllm:cache_config_info``."""
    bytes_per_token: int = BYTES_PER_TOKEN
    """Bytes of prompt text per KV-cache token when sizing a replica's LRU bound in the index."""


class Policy:
    """Chooses one of the ready candidates; never called with an empty sequence."""

    name: ClassVar[str] = ""
    reads_prompt: ClassVar[bool] = False
    """Whether the policy reads the request's prefix key and chain (``RouteRequest.prefix_key``,
    ``chain``): for a model whose policy does not, the request path computes neither."""

    def __init__(self, options: PolicyOptions) -> None:
        self.options = options

    def pick(self, candidates: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        raise NotImplementedError

    async def route(self, candidates: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        """The pick the request path makes: :meth:`pick` unless the policy reads shared state."""
        return self.pick(candidates, request)

    def on_start(self, endpoint: Endpoint, request: RouteRequest) -> None:
        """Called when a request is sent to the endpoint (optional hook)."""

    def on_finish(self, endpoint: Endpoint, request: RouteRequest, ok: bool) -> None:
        """Called when that request ends (optional hook)."""
