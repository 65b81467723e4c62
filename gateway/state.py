"""Everything ``create_app`` builds for one gateway, owned by its lifespan (no globals)."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

from gateway.admission.base import Admission
from gateway.auth.base import Authenticator
from gateway.auth.keys import KeyStore
from gateway.idempotency.kept import KeptStreams
from gateway.idempotency.store import IdempotencyStore
from gateway.lora.adapters import AdapterStore
from gateway.metrics import GatewayMetrics
from gateway.on_demand.wake import Wakes
from gateway.redis_clients import RedisClients
from gateway.replicas.ejection import Ejection
from gateway.replicas.inflight import InflightShare
from gateway.replicas.model_cards import ModelCards
from gateway.replicas.table import Endpoint, ReplicaTable
from gateway.responses_api.affinity import ResponseAffinity
from gateway.responses_api.background import BackgroundResponses
from gateway.routing.base import Policy
from gateway.routing.factory import PolicyFactory
from gateway.routing.prefix.shared_index import SharedIndex
from gateway.settings import GatewaySettings
from gateway.shutdown import OpenRequests
from gateway.tracing import Tracing
from gateway.upstream.credentials import Credentials
from gateway.upstream.http1 import ConnectionPool
from llmgw_contract.fleet import Fleet, Model
from llmgw_contract.redis_keys import RedisKeys


@dataclass(slots=True)
class Gateway:
    settings: GatewaySettings
    fleet: Fleet
    names: dict[str, Model]
    table: ReplicaTable
    policies: dict[str, Policy]
    policy_for: PolicyFactory
    """The one policy factory: at start and on every fleet reload."""
    admission: Admission
    auth: Authenticator
    client: httpx.AsyncClient
    upstream: ConnectionPool
    redis: RedisClients
    """Every Redis client of the gateway, by role (gateway/redis_clients.py); closed by the lifespan."""
    keys: RedisKeys
    metrics: GatewayMetrics
    ejection: Ejection
    inflight: InflightShare
    wakes: Wakes
    open_requests: OpenRequests
    affinity: ResponseAffinity
    idempotency: IdempotencyStore
    kept: KeptStreams
    """The keyed streams this gateway relays (gateway/idempotency/kept.py)."""
    background: BackgroundResponses
    """The background Responses this gateway runs (gateway/responses_api/background.py)."""
    lora: AdapterStore
    key_store: KeyStore
    # The Authorization each replica gets: the workers' key to supervised ones, an endpoint's own to it.
    credentials: Credentials
    index: SharedIndex | None = None
    cards: ModelCards = field(default_factory=ModelCards)
    tracing: Tracing = field(default_factory=lambda: Tracing(False, "", ""))

    def credentials_http(self, ep: Endpoint) -> dict[str, str]:
        """``ep``'s Authorization for httpx (health, metrics, model list, LoRA admin), read at each call:
        a fleet reload may replace the credentials."""
        return self.credentials.http(ep)
