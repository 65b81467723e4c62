"""The HTTP surface: the proxied OpenAI endpoints, the model list, health, readiness and metrics."""

from __future__ import annotations

import time
from typing import Any

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from gateway.discovery import Discovery
from gateway.fastpath import PROXIED
from gateway.openapi import request_body
from gateway.proxy import Proxy
from gateway.state import Gateway
from gateway.wake import model_state

JSON = "application/json"


def model_list(gw: Gateway, created: int) -> dict[str, Any]:
    """Every public name; ``state`` is the serving model's (awake, waking, asleep, unavailable) and
    ``activation`` says whether a request wakes it (on_demand) or it always runs."""
    data = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "llm-gateway",
            "root": model.name,
            "state": model_state(gw.table.pool(model.name)),
            "activation": model.activation,
        }
        for name, model in gw.names.items()
    ]
    return {"object": "list", "data": data}


def readiness(gw: Gateway, discovery: Discovery) -> tuple[bool, dict[str, Any]]:
    """Ready when some model is awake, or an on-demand one can be woken (asleep or waking)."""
    models = {
        p.model: {"ready_replicas": p.ready_count, "replicas": len(p.endpoints), "state": model_state(p)}
        for p in gw.table.pools()
    }
    ready = any(m["state"] in ("awake", "asleep", "waking") for m in models.values())
    redis = "ok" if discovery.redis_ok else "unreachable"
    degraded = gw.admission.degraded or not discovery.redis_ok
    index = gw.index.mode if gw.index is not None else "off"
    detail = {"ready": ready, "redis": redis, "degraded": degraded, "prefix_index": index, "models": models}
    return ready, detail


def add_proxy_route(app: FastAPI, proxy: Proxy, endpoint: str) -> None:
    async def handler(request: Request) -> Response:
        return await proxy.respond(request.scope, request.receive, endpoint)

    app.add_api_route(
        f"/v1/{endpoint}",
        handler,
        methods=["POST"],
        name=endpoint.replace("/", "_"),
        openapi_extra=request_body(endpoint),
        response_class=Response,
    )


def add_routes(app: FastAPI, gw: Gateway, proxy: Proxy, discovery: Discovery) -> None:
    created = int(time.time())
    for endpoint in PROXIED:
        add_proxy_route(app, proxy, endpoint)

    @app.get("/v1/models")
    async def models() -> Response:
        return Response(orjson.dumps(model_list(gw, created)), media_type=JSON)

    @app.get("/health")
    async def health() -> Response:
        return Response(b'{"status":"ok"}', media_type=JSON)

    @app.get("/ready")
    async def ready() -> Response:
        ok, detail = readiness(gw, discovery)
        return Response(orjson.dumps(detail), 200 if ok else 503, media_type=JSON)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(gw.metrics.render(), media_type="text/plain; version=0.0.4")
