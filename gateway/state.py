"""Everything ``create_app`` builds for one gateway, owned by its lifespan (no globals)."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
import redis.asyncio as aioredis

from contract.fleet import Fleet, Model
from contract.redis_keys import RedisKeys
from gateway.admission.base import Admission
from gateway.affinity import ResponseAffinity
from gateway.auth.base import Authenticator
from gateway.auth.keys import KeyStore
from gateway.credentials import Credentials
from gateway.ejection import Ejection
from gateway.http1 import ConnectionPool
from gateway.inflight import InflightShare
from gateway.lora import AdapterStore
from gateway.metrics import GatewayMetrics
from gateway.model_cards import ModelCards
from gateway.pool import ReplicaTable
from gateway.routing.base import Policy
from gateway.routing.shared_index import SharedIndex
from gateway.settings import GatewaySettings
from gateway.shutdown import OpenRequests
from gateway.tracing import Tracing
from gateway.wake import Wakes


@dataclass(slots=True)
class Gateway:
    settings: GatewaySettings
    fleet: Fleet
    names: dict[str, Model]
    table: ReplicaTable
    policies: dict[str, Policy]
    admission: Admission
    auth: Authenticator
    client: httpx.AsyncClient
    upstream: ConnectionPool
    redis: aioredis.Redis
    keys: RedisKeys
    metrics: GatewayMetrics
    ejection: Ejection
    inflight: InflightShare
    wakes: Wakes
    open_requests: OpenRequests
    affinity: ResponseAffinity
    lora: AdapterStore
    key_store: KeyStore
    # The Authorization each replica gets: the workers' key to supervised ones, an endpoint's own to it.
    credentials: Credentials
    index: SharedIndex | None = None
    cards: ModelCards = field(default_factory=ModelCards)
    tracing: Tracing = field(default_factory=lambda: Tracing(False, "", ""))
