"""The HTTP surface: the proxied endpoints (gateway/endpoints.py), the model list and one model,
health, readiness and metrics."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from gateway.admin.auth import operator_view
from gateway.edge.openapi import request_body
from gateway.endpoints import ROUTES, Route
from gateway.errors import ModelNotFound, error_response
from gateway.pipeline.proxy import Proxy
from gateway.replicas.discovery import Discovery
from gateway.replicas.table import Endpoint
from gateway.state import Gateway
from llmgw_contract.fleet import Model

JSON = "application/json"


def model_entry(name: str, model: Model, created: int, gw: Gateway) -> dict[str, Any]:
    """One model's entry: OpenAI's fields, what the replicas say of it (``max_model_len``; an adapter's
    ``parent`` and ``root``: gateway/replicas/model_cards.py), its state and activation."""
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "llm-gateway",
        **gw.cards.card(name, model.name),
        "state": gw.table.pool(model.name).state,
        "activation": model.activation,
    }


def model_list(gw: Gateway, created: int) -> dict[str, Any]:
    """Every public name and runtime adapter; ``state`` is the serving model's (awake, waking, asleep,
    unavailable) and ``activation`` says whether a request wakes it (on_demand) or it always runs."""
    data = [model_entry(name, model, created, gw) for name, model in gw.names.items()]
    data += [
        model_entry(a.name, gw.names[a.model], created, gw)
        for a in gw.lora.adapters.values()
        if a.model in gw.names
    ]
    return {"object": "list", "data": data}


def one_model(gw: Gateway, name: str, created: int) -> Response:
    """OpenAI's ``GET /v1/models/{model}``: a public name, alias or adapter (fleet or runtime)."""
    adapter = gw.lora.adapters.get(name)
    model = gw.names.get(name) or (gw.names.get(adapter.model) if adapter is not None else None)
    if model is None:
        return error_response(ModelNotFound(f"The model '{name}' does not exist", param="model"))
    return Response(orjson.dumps(model_entry(name, model, created, gw)), media_type=JSON)


def serving(redis_ok: bool, degraded_ready: bool) -> bool:
    """Whether this gateway can serve (Kubernetes' readiness): it answers, its settings loaded, and
    Redis is reachable or serving degraded without it (local admission) is allowed."""
    return redis_ok or degraded_ready


def kv_index_modes(endpoints: Sequence[Endpoint]) -> dict[str, int]:
    """How many routable replicas are in each prefix-index mode (``exact``: fed from their KV events)."""
    modes = [e.record.kv_index for e in endpoints if e.record.routable]
    return {"exact": modes.count("exact"), "approximate": modes.count("approximate")}


def key_mode(counts: Sequence[dict[str, int]]) -> str:
    """``exact`` when every routable replica is exact, ``approximate`` when none is, else ``mixed``."""
    exact, approx = sum(c["exact"] for c in counts), sum(c["approximate"] for c in counts)
    return "mixed" if exact and approx else "exact" if exact else "approximate"


def readiness(gw: Gateway, discovery: Discovery) -> tuple[bool, dict[str, Any]]:
    """Ready when this gateway can serve, whatever its models' states: a model without a ready replica
    gets the clear 503 (or waits for its wake) from here, not a proxy error from a Service with no pod
    left. The models' states are in the body (and in ``llmgw_model_state``)."""
    models: dict[str, dict[str, Any]] = {
        p.model: {
            "ready_replicas": p.ready_count,
            "replicas": len(p.endpoints),
            "state": p.state,
            "kv_index": kv_index_modes(p.endpoints),
        }
        for p in gw.table.pools()
    }
    ready = serving(discovery.redis_ok, gw.settings.degraded_ready)
    redis = "ok" if discovery.redis_ok and not gw.admission.degraded else "unreachable"
    degraded = gw.admission.degraded or not discovery.redis_ok
    index = gw.index.mode if gw.index is not None else "off"
    keys = "off" if gw.index is None else key_mode([m["kv_index"] for m in models.values()])
    detail = {
        "ready": ready,
        "redis": redis,
        "degraded": degraded,
        "prefix_index": index,
        "prefix_index_keys": keys,
        "models": models,
    }
    return ready, detail


def add_proxy_route(app: FastAPI, proxy: Proxy, api: Route) -> None:
    async def handler(request: Request) -> Response:
        return await proxy.respond(
            request.scope, request.receive, api, request.path_params.get("response_id", "")
        )

    app.add_api_route(
        api.path,
        handler,
        methods=[api.method],
        name=f"{api.method.lower()}_{api.name}".replace("/", "_").replace("{", "").replace("}", ""),
        openapi_extra=request_body(api),
        response_class=Response,
    )


def add_routes(app: FastAPI, gw: Gateway, proxy: Proxy, discovery: Discovery) -> None:
    created = int(time.time())
    for api in ROUTES:
        add_proxy_route(app, proxy, api)

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        await gw.auth.authenticate(request.headers)  # keys on: the list too needs a key
        return Response(orjson.dumps(model_list(gw, created)), media_type=JSON)

    @app.get("/v1/models/{model:path}")
    async def model(model: str, request: Request) -> Response:
        await gw.auth.authenticate(request.headers)  # keys on: one model too needs a key
        return one_model(gw, model, created)

    @app.get("/health")
    async def health() -> Response:
        return Response(b'{"status":"ok"}', media_type=JSON)

    @app.get("/ready")
    async def ready(request: Request) -> Response:
        """The status for anyone (a probe, a load balancer); the detail (models, states, Redis) only for
        the operator (:func:`operator_view`)."""
        ok, detail = readiness(gw, discovery)
        peer = request.client.host if request.client is not None else None
        body = detail if operator_view(gw, request.headers, peer) else {"ready": ok}
        return Response(orjson.dumps(body), 200 if ok else 503, media_type=JSON)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(gw.metrics.render(), media_type="text/plain; version=0.0.4")
