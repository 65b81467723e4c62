"""``create_app(settings)``: builds one gateway and owns its background tasks in the lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from gateway.admin.routes import add_admin_routes
from gateway.admission import build_admission, lean_of
from gateway.auth.keys import KeyStore
from gateway.auth.redis_auth import RedisAuth, build_auth
from gateway.edge.fastpath import GatewayApp
from gateway.edge.routes import add_routes
from gateway.errors import (
    GatewayError,
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    error_response,
)
from gateway.fleet_reload import FleetReload
from gateway.idempotency.events import EventLog
from gateway.idempotency.kept import KeptStreams
from gateway.idempotency.store import IdempotencyStore
from gateway.lora.adapters import AdapterStore
from gateway.metrics import GatewayMetrics
from gateway.on_demand.wake import ReadyNotices, Wakes
from gateway.periodic import Background
from gateway.pipeline.proxy import Proxy
from gateway.redis_clients import RedisClients, build_redis_clients
from gateway.replicas.discovery import Departures, Discovery, nothing_indexed
from gateway.replicas.ejection import Ejection
from gateway.replicas.inflight import InflightShare
from gateway.replicas.model_cards import CardFetcher
from gateway.replicas.monitor import Monitor
from gateway.replicas.table import ReplicaTable
from gateway.responses_api.affinity import ResponseAffinity
from gateway.responses_api.background import BackgroundResponses, BackgroundStore
from gateway.routing import load_routable_fleet
from gateway.routing.factory import PolicyFactory
from gateway.routing.prefix.shared_index import SharedIndex
from gateway.settings import GatewaySettings
from gateway.shutdown import OpenRequests
from gateway.state import Gateway
from gateway.tracing import Tracing
from gateway.upstream.credentials import credentials_for
from gateway.upstream.http1 import ConnectionPool
from llmgw_contract.backoff import Backoff
from llmgw_contract.redis_keys import RedisKeys

log = logging.getLogger("llmgw.app")


def shared_index(
    settings: GatewaySettings, keys: RedisKeys, metrics: GatewayMetrics, clients: RedisClients
) -> SharedIndex | None:
    """The shared prefix index on its own Redis client (a short timeout: it is on the request path),
    or None with ``LLMGW_PREFIX_INDEX=false``."""
    if clients.index is None:
        return None
    return SharedIndex(
        clients.index, keys, settings.session_ttl_s, settings.prefix_index_retry_s, metrics=metrics
    )


def build_gateway(settings: GatewaySettings) -> Gateway:
    fleet = load_routable_fleet(settings.fleet_file)
    metrics = GatewayMetrics()
    keys = RedisKeys(settings.redis_prefix)
    table = ReplicaTable(m.name for m in fleet.models)
    clients = build_redis_clients(settings)
    redis = clients.state
    share = InflightShare(redis, keys, settings.gateway_id, table, settings.load_share_max_age_s)
    index = shared_index(settings, keys, metrics, clients)
    policy_for = PolicyFactory(settings, index)
    store = KeyStore(clients.keys, keys)
    idempotency = IdempotencyStore(redis, keys, settings.idempotency_ttl_s, settings.request_timeout_s)
    events = EventLog(redis, settings.idempotency_max_events)
    kept = KeptStreams(idempotency, events, metrics)
    background = BackgroundStore(redis, keys, events, settings.responses_ttl_s)
    admission = build_admission(settings, keys, metrics, clients)
    return Gateway(
        settings=settings,
        fleet=fleet,
        names=fleet.names(),
        table=table,
        policies={m.name: policy_for(m) for m in fleet.models},
        policy_for=policy_for,
        admission=admission,
        auth=build_auth(settings, keys, metrics, store, clients, lean_of(admission)),
        client=httpx.AsyncClient(timeout=settings.connect_timeout_s),
        upstream=ConnectionPool(
            settings.max_connections, settings.connect_timeout_s, settings.upstream_idle_s
        ),
        redis=clients,
        keys=keys,
        metrics=metrics,
        ejection=Ejection(
            Backoff(settings.eject_base_s, settings.eject_max_s),
            settings.eject_after,
            settings.lost_after_probes,
        ),
        inflight=share,
        wakes=Wakes(redis, keys, settings.gateway_id, metrics),
        open_requests=OpenRequests(settings.shutdown_grace_s),
        key_store=store,
        credentials=credentials_for(settings, fleet),
        index=index,
        affinity=ResponseAffinity(redis, keys, settings.responses_ttl_s),
        idempotency=idempotency,
        kept=kept,
        background=BackgroundResponses(background, kept, metrics),
        lora=AdapterStore(redis, keys, fleet.models, table),
        tracing=Tracing(settings.tracing, settings.otlp_traces_endpoint, settings.gateway_id),
    )


def start_background(gw: Gateway, discovery: Discovery, notices: ReadyNotices) -> Background:
    s = gw.settings
    monitor = Monitor(
        gw.client, gw.table, gw.ejection, gw.metrics, s.health_timeout_s, headers=gw.credentials_http
    )
    reload = FleetReload(gw, discovery)
    bg = Background(failed=lambda task, _: gw.metrics.task_failures.labels(task).inc())
    bg.start(s.registry_poll_s, reload.tick, "fleet_reload")
    bg.start(s.registry_poll_s, discovery.tick, "discovery")
    bg.start(s.health_interval_s, monitor.health_tick, "health")
    bg.start(s.load_scrape_interval_s, monitor.load_tick, "load_scrape")
    bg.start(s.load_share_interval_s, gw.inflight.tick, "inflight_share")
    bg.start(s.lora_sync_s, gw.lora.tick, "lora_sync")
    cards = CardFetcher(gw.cards, gw.client, gw.table, gw.credentials_http)
    bg.start(s.registry_poll_s, cards.tick, "model_cards")
    bg.start(0.0, notices.step, "ready_notices")
    if isinstance(gw.auth, RedisAuth):
        bg.start(0.0, gw.auth.changes.step, "key_changes")
    return bg


@contextlib.asynccontextmanager
async def lifespan_for(gw: Gateway, discovery: Discovery) -> AsyncIterator[None]:
    await discovery.refresh()
    await gw.lora.tick()
    await gw.admission.start()

    async def on_ready(model: str) -> None:
        await discovery.refresh()
        gw.wakes.notify()

    notices = ReadyNotices(gw.redis.state, gw.keys, on_ready)
    bg = start_background(gw, discovery, notices)
    log.info("gateway %s up: models=%s", gw.settings.gateway_id, ",".join(m.name for m in gw.fleet.models))
    try:
        yield
    finally:
        await gw.open_requests.aclose()
        await gw.kept.aclose()
        await bg.close()
        await notices.close()
        await gw.inflight.leave()
        await gw.auth.aclose()  # its refunds under way first: on the admission queue's connection
        await gw.admission.stop()
        if gw.index is not None:
            await gw.index.aclose()
        gw.upstream.close()
        await gw.client.aclose()
        await gw.redis.aclose()
        await asyncio.to_thread(gw.tracing.shutdown)  # its flush blocks: not on the event loop


def add_error_handlers(app: FastAPI) -> None:
    async def gateway_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, GatewayError)
        return error_response(exc)

    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            return error_response(MethodNotAllowed("method not allowed on this path"))
        if exc.status_code == 404:
            return error_response(NotFound("no such path; see /v1/models and the OpenAI API"))
        return error_response(InvalidRequest(str(exc.detail)))

    async def validation_error(_: Request, exc: Exception) -> Response:
        return error_response(InvalidRequest(f"invalid request: {exc}"))

    async def unexpected(_: Request, exc: Exception) -> Response:
        log.error("unexpected error: %r", exc, exc_info=exc)
        return error_response(InternalError("the gateway failed to serve this request"))

    app.add_exception_handler(GatewayError, gateway_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, unexpected)


def create_app(settings: GatewaySettings, **fastapi_kwargs: Any) -> FastAPI:
    gw = build_gateway(settings)
    departures = Departures(gw.upstream.retain, gw.index.forget_absent if gw.index else nothing_indexed)
    discovery = Discovery(gw.redis.state, gw.keys, gw.fleet, gw.table, gw.metrics, departures)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with lifespan_for(gw, discovery):
            yield

    if not (settings.docs if settings.docs is not None else not settings.auth):
        fastapi_kwargs = {"docs_url": None, "redoc_url": None, "openapi_url": None, **fastapi_kwargs}
    app = GatewayApp(title="llm-gateway", version="0.1.0", lifespan=lifespan, **fastapi_kwargs)
    app.state.gateway = gw
    app.state.discovery = discovery
    add_error_handlers(app)
    proxy = Proxy(gw)
    add_routes(app, gw, proxy, discovery)
    add_admin_routes(app, gw)
    app.proxy = proxy  # the proxied paths, ahead of FastAPI (gateway/edge/fastpath.py)
    return app
