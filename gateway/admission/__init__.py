"""Admission: a slot (lease) per running request, waiting in a queue when the model is full."""

from __future__ import annotations

from gateway.admission.base import Admission, AdmissionUnavailable, Lease, Ticket
from gateway.admission.fallback import FallbackAdmission
from gateway.admission.local import LocalAdmission
from gateway.admission.open import OpenAdmission
from gateway.admission.presence import Presence
from gateway.admission.redis_queue import RedisAdmission
from gateway.admission.redis_wire import PipelinedRedis
from gateway.metrics import GatewayMetrics
from gateway.redis_clients import RedisClients
from gateway.settings import GatewaySettings
from llmgw_contract.redis_keys import RedisKeys

__all__ = ["Admission", "AdmissionUnavailable", "Lease", "Ticket", "build_admission", "lean_of"]

PRESENCE_TTL_INTERVALS = 3


def build_admission(
    settings: GatewaySettings, keys: RedisKeys, metrics: GatewayMetrics, clients: RedisClients
) -> Admission:
    """The shared Redis queue with local fallback, or no admission at all when switched off."""
    redis, blocking = clients.admission, clients.blocking
    if not settings.admission or redis is None or blocking is None:
        return OpenAdmission()
    timeout = settings.admission_redis_timeout_s
    shared = RedisAdmission(
        redis,
        blocking,
        keys,
        settings.gateway_id,
        settings.lease_ttl_s,
        metrics,
        io_timeout_s=timeout,
        beat_s=settings.presence_interval_s,
        presence=clients.presence,
    )
    presence_ttl = PRESENCE_TTL_INTERVALS * settings.presence_interval_s
    presence = Presence(redis, keys, shared.instance, presence_ttl)
    return FallbackAdmission(shared, LocalAdmission(), presence, metrics, settings.presence_interval_s)


def lean_of(admission: Admission) -> PipelinedRedis | None:
    """The shared queue's pipelined connection (None without one), which it owns and closes on stop:
    the per-key rate limits' scripts (gateway/auth/ratelimit.py) go to the same server and share it, so
    that the two connections' calls of one tick (a request's release and refund) leave in one write."""
    return admission.shared.lean if isinstance(admission, FallbackAdmission) else None
