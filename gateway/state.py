"""Everything ``create_app`` builds for one gateway, owned by its lifespan (no globals)."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from contract.fleet import Fleet, Model
from contract.redis_keys import RedisKeys
from gateway.admission.base import Admission
from gateway.auth.base import Authenticator
from gateway.auth.keys import KeyStore
from gateway.lora.adapters import AdapterStore
from gateway.metrics import GatewayMetrics
from gateway.on_demand.wake import Wakes
from gateway.redis_clients import RedisClients
from gateway.replicas.ejection import Ejection
from gateway.replicas.inflight import InflightShare
from gateway.replicas.table import ReplicaTable
from gateway.responses_api.affinity import ResponseAffinity
from gateway.routing.base import Policy
from gateway.routing.factory import PolicyFactory
from gateway.routing.prefix.shared_index import SharedIndex
from gateway.settings import GatewaySettings
from gateway.shutdown import OpenRequests
from gateway.upstream.http1 import ConnectionPool


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
    lora: AdapterStore
    key_store: KeyStore
    # Headers every request to a replica carries besides its own (vLLM's API key when one is set).
    upstream_headers: list[tuple[bytes, bytes]]
    index: SharedIndex | None = None
