"""``create_app(settings)``: builds one gateway and owns its background tasks in the lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import redis.asyncio as aioredis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from contract.backoff import Backoff
from contract.fleet import Fleet, Model
from contract.redis_keys import RedisKeys
from gateway.admin import add_admin_routes
from gateway.admission import build_admission
from gateway.affinity import ResponseAffinity
from gateway.auth.redis_auth import build_auth, key_store
from gateway.credentials import Credentials
from gateway.discovery import Discovery
from gateway.ejection import Ejection
from gateway.errors import (
    GatewayError,
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    error_response,
)
from gateway.fastpath import GatewayApp
from gateway.fleet_reload import FleetReload
from gateway.http1 import ConnectionPool
from gateway.inflight import InflightShare
from gateway.lora import AdapterStore
from gateway.metrics import GatewayMetrics
from gateway.model_cards import CardFetcher
from gateway.monitor import Monitor
from gateway.periodic import Background
from gateway.pool import ReplicaTable
from gateway.proxy import Proxy
from gateway.routes import add_routes
from gateway.routing import PolicyOptions, build_policy, load_routable_fleet
from gateway.routing.shared_index import SharedIndex
from gateway.settings import GatewaySettings
from gateway.shutdown import OpenRequests
from gateway.state import Gateway
from gateway.tracing import Tracing
from gateway.wake import ReadyNotices, Wakes

log = logging.getLogger("llmgw.app")


def policy_options(
    model: Model, settings: GatewaySettings, index: SharedIndex | None = None
) -> PolicyOptions:
    """The model's own ε from the fleet file, else the gateway's ``LLMGW_PREFIX_EPSILON``; the shared
    prefix index, its bounds and its chunking."""
    eps = settings.prefix_epsilon if model.epsilon is None else model.epsilon
    return PolicyOptions(
        epsilon=eps,
        inflight_epsilon=settings.prefix_inflight_epsilon,
        share_window=settings.prefix_share_window,
        model=model.name,
        index=index,
        chunk_bytes=settings.prefix_chunk_bytes,
        kv_tokens=settings.prefix_index_kv_tokens,
        bytes_per_token=settings.prefix_bytes_per_token,
    )


def shared_index(settings: GatewaySettings, keys: RedisKeys, metrics: GatewayMetrics) -> SharedIndex | None:
    """The shared prefix index on its own Redis connection (a short timeout: it is on the request path),
    or None with ``LLMGW_PREFIX_INDEX=false``."""
    if not settings.prefix_index:
        return None
    t = settings.prefix_index_timeout_s
    redis = aioredis.Redis.from_url(settings.redis_url, socket_timeout=t, socket_connect_timeout=t)
    return SharedIndex(redis, keys, settings.session_ttl_s, settings.prefix_index_retry_s, metrics=metrics)


def credentials(settings: GatewaySettings, fleet: Fleet) -> Credentials:
    """The workers' key (vLLM's --api-key on the supervised replicas) and each endpoint's own."""
    return Credentials(fleet, settings.vllm_api_key.get_secret_value() if settings.vllm_api_key else "")


def build_gateway(settings: GatewaySettings) -> Gateway:
    fleet = load_routable_fleet(settings.fleet_file)
    metrics = GatewayMetrics()
    keys = RedisKeys(settings.redis_prefix)
    table = ReplicaTable(m.name for m in fleet.models)
    redis = aioredis.Redis.from_url(settings.redis_url, socket_timeout=2.0, socket_connect_timeout=2.0)
    share = InflightShare(redis, keys, settings.gateway_id, table, settings.load_share_max_age_s)
    index = shared_index(settings, keys, metrics)
    store = key_store(settings, keys)
    return Gateway(
        settings=settings,
        fleet=fleet,
        names=fleet.names(),
        table=table,
        policies={m.name: build_policy(m.policy, policy_options(m, settings, index)) for m in fleet.models},
        admission=build_admission(settings, keys, metrics),
        auth=build_auth(settings, keys, metrics, store),
        client=httpx.AsyncClient(timeout=settings.connect_timeout_s),
        upstream=ConnectionPool(settings.max_connections, settings.connect_timeout_s),
        redis=redis,
        keys=keys,
        metrics=metrics,
        ejection=Ejection(Backoff(settings.eject_base_s, settings.eject_max_s)),
        inflight=share,
        wakes=Wakes(redis, keys, settings.gateway_id, metrics),
        open_requests=OpenRequests(settings.shutdown_grace_s),
        key_store=store,
        credentials=credentials(settings, fleet),
        index=index,
        affinity=ResponseAffinity(redis, keys, settings.responses_ttl_s),
        lora=AdapterStore(redis, keys, fleet.models),
        tracing=Tracing(settings.tracing, settings.otlp_traces_endpoint, settings.gateway_id),
    )


def start_background(gw: Gateway, discovery: Discovery, notices: ReadyNotices) -> Background:
    s = gw.settings
    monitor = Monitor(
        gw.client, gw.table, gw.ejection, gw.metrics, headers=lambda ep: gw.credentials.http(ep)
    )
    reload = FleetReload(
        gw, discovery, lambda m: build_policy(m.policy, policy_options(m, s)), lambda f: credentials(s, f)
    )
    bg = Background()
    bg.start(s.registry_poll_s, reload.tick)
    bg.start(s.registry_poll_s, discovery.tick)
    bg.start(s.health_interval_s, monitor.health_tick)
    bg.start(s.load_scrape_interval_s, monitor.load_tick)
    bg.start(s.load_share_interval_s, gw.inflight.tick)
    bg.start(s.lora_sync_s, gw.lora.tick)
    bg.start(
        s.registry_poll_s, CardFetcher(gw.cards, gw.client, gw.table, lambda ep: gw.credentials.http(ep)).tick
    )
    bg.start(0.0, notices.step)
    return bg


@contextlib.asynccontextmanager
async def lifespan_for(gw: Gateway, discovery: Discovery) -> AsyncIterator[None]:
    await discovery.refresh()
    await gw.lora.tick()
    await gw.admission.start()

    async def on_ready(model: str) -> None:
        await discovery.refresh()
        gw.wakes.notify()

    notices = ReadyNotices(gw.redis, gw.keys, on_ready)
    bg = start_background(gw, discovery, notices)
    log.info("gateway %s up: models=%s", gw.settings.gateway_id, ",".join(m.name for m in gw.fleet.models))
    try:
        yield
    finally:
        await gw.open_requests.aclose()
        await bg.close()
        await notices.close()
        await gw.inflight.leave()
        await gw.admission.stop()
        await gw.auth.aclose()
        await gw.key_store.redis.aclose()
        gw.upstream.close()
        await gw.client.aclose()
        await gw.redis.aclose()
        if gw.index is not None:
            await gw.index.aclose()
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
    discovery = Discovery(gw.redis, gw.keys, gw.fleet, gw.table, gw.metrics, gw.upstream, gw.index)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with lifespan_for(gw, discovery):
            yield

    app = GatewayApp(title="llm-gateway", version="0.1.0", lifespan=lifespan, **fastapi_kwargs)
    app.state.gateway = gw
    app.state.discovery = discovery
    add_error_handlers(app)
    proxy = Proxy(gw)
    add_routes(app, gw, proxy, discovery)
    add_admin_routes(app, gw)
    app.proxy = proxy  # the proxied paths, ahead of FastAPI (gateway/fastpath.py)
    return app
