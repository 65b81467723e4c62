"""LoRA adapters added and removed at run time across a model's replicas (``/admin/lora``), behind the
admin check of ``gateway.admin.auth`` (``Authorization: Bearer <LLMGW_ADMIN_KEY>``; unset: 403)."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from pydantic import BaseModel, Field, ValidationError
from starlette.responses import Response

from gateway.admin.auth import check_admin
from gateway.errors import Conflict, InvalidRequest, NotFound, UpstreamError
from gateway.lora.adapters import AdapterStore, RuntimeAdapter, holder_of, load, unload
from gateway.state import Gateway
from llmgw_contract.fleet import ModelName

log = logging.getLogger("llmgw.admin")
JSON = "application/json"


class AdapterRequest(BaseModel):
    model: ModelName = Field(description="the base model whose replicas load the adapter")
    name: ModelName = Field(description="the adapter's public name (what clients send as model)")
    path: str = Field(min_length=1, description="the adapter's folder (or hub id) as the replicas see it")


async def adapter_request(request: Request) -> AdapterRequest:
    try:
        return AdapterRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        raise InvalidRequest(f"invalid adapter request: {exc.errors()[0]['msg']}") from None


def listing(store: AdapterStore) -> dict[str, Any]:
    return {
        "data": [
            {"name": a.name, "model": a.model, "path": a.path, "replicas": a.replicas}
            for a in sorted(store.adapters.values(), key=lambda a: a.name)
        ]
    }


async def add_adapter(gw: Gateway, store: AdapterStore, req: AdapterRequest) -> dict[str, Any]:
    model = gw.names.get(req.model)
    if model is None or model.name != req.model:
        raise NotFound(f"no base model '{req.model}' in the fleet", param="model")
    if not model.engine.runtime_lora:
        raise InvalidRequest(
            f"model '{req.model}' has engine.runtime_lora off in the fleet file", param="model"
        )
    if req.name in gw.names or req.name in store.adapters:
        raise Conflict(f"the name '{req.name}' is already in use", param="name")
    replicas = [e for e in gw.table.pool(model.name).endpoints if e.record.routable]
    result = await load(gw.client, replicas, req.name, req.path, gw.credentials.http)
    if not result.done:
        raise UpstreamError(
            f"no replica of '{model.name}' loaded the adapter: {result.failed or 'none ready'}"
        )
    holders = frozenset(holder_of(e) for e in replicas if e.id in result.done)
    await store.save(RuntimeAdapter(req.name, model.name, req.path, holders))
    log.info(
        "lora adapter=%s model=%s loaded on %s failed=%s", req.name, model.name, result.done, result.failed
    )
    return {"name": req.name, "model": model.name, "loaded": result.done, "failed": result.failed}


async def remove_adapter(gw: Gateway, store: AdapterStore, name: str) -> dict[str, Any]:
    adapter = store.adapters.get(name)
    if adapter is None:
        raise NotFound(f"no runtime adapter '{name}'", param="name")
    pool = gw.table.find(adapter.model)
    replicas = [e for e in pool.endpoints if adapter.holds(e)] if pool is not None else []
    result = await unload(gw.client, replicas, name, gw.credentials.http)
    await store.drop(adapter)
    log.info(
        "lora adapter=%s model=%s unloaded from %s failed=%s", name, adapter.model, result.done, result.failed
    )
    return {"name": name, "model": adapter.model, "unloaded": result.done, "failed": result.failed}


def add_lora_routes(app: FastAPI, gw: Gateway) -> None:
    store = gw.lora

    @app.get("/admin/lora", include_in_schema=False)
    async def list_adapters(request: Request) -> Response:
        check_admin(gw, request.headers)
        return Response(orjson.dumps(listing(store)), media_type=JSON)

    @app.post("/admin/lora", include_in_schema=False)
    async def load_adapter(request: Request) -> Response:
        check_admin(gw, request.headers)
        out = await add_adapter(gw, store, await adapter_request(request))
        return Response(orjson.dumps(out), media_type=JSON)

    @app.delete("/admin/lora/{name:path}", include_in_schema=False)
    async def unload_adapter(request: Request, name: str) -> Response:
        check_admin(gw, request.headers)
        return Response(orjson.dumps(await remove_adapter(gw, store, name)), media_type=JSON)
