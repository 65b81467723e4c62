"""Everything ``create_app`` builds for one gateway, owned by its lifespan (no globals)."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import redis.asyncio as aioredis

from gateway.admission.base import Admission
from gateway.auth.base import Authenticator
from gateway.health import Ejection
from gateway.http1 import Pool
from gateway.inflight import InflightShare
from gateway.keys import Keys
from gateway.metrics import GatewayMetrics
from gateway.pool import ReplicaTable
from gateway.routing.base import Policy
from gateway.settings import GatewaySettings
from workers.fleet import Fleet, Model


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
    upstream: Pool
    redis: aioredis.Redis
    keys: Keys
    metrics: GatewayMetrics
    ejection: Ejection
    inflight: InflightShare
    redis_ok: bool = False
