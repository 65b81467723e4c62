"""API key management under ``/admin/keys``, allowed only with the admin key (``gateway.admin.auth``).

The admin key is a gateway setting (``LLMGW_ADMIN_KEY``, from a Secret in rendered deployments); it is
compared in constant time and never logged. Without it set, every admin endpoint answers 403. The admin
key is not an API key: it does not call models, and API keys never reach these endpoints.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import Response

from gateway.admin.auth import check_admin
from gateway.auth.keys import ApiKey, new_secret
from gateway.errors import InvalidRequest, NotFound
from gateway.state import Gateway

log = logging.getLogger("llmgw.admin")
JSON = "application/json"


class NewKey(BaseModel):
    """The body of ``POST /admin/keys``: what ``llmgw-keys create`` asks for."""

    model_config = ConfigDict(extra="forbid")
    tenant: str = Field(min_length=1)
    models: list[str] | None = None
    priority: int = Field(0, ge=0)
    max_priority: int | None = Field(None, ge=0)
    rpm: int = Field(0, ge=0)
    tpm: int = Field(0, ge=0)
    max_wait_s: float | None = Field(None, gt=0)
    name: str = ""

    def key(self, key_id: str) -> ApiKey:
        prio = self.priority if self.max_priority is None else self.max_priority
        models = tuple(self.models) if self.models is not None else None
        return ApiKey(
            key_id, self.tenant, models, self.priority, prio, self.rpm, self.tpm, self.max_wait_s, self.name
        )


def public(key: ApiKey) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(key.to_json())
    return data


def parse_new_key(raw: bytes) -> NewKey:
    try:
        return NewKey.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        raise InvalidRequest(f"invalid key: {first['msg']}", param=field) from None


def add_key_routes(app: FastAPI, gw: Gateway) -> None:
    @app.get("/admin/keys", include_in_schema=False)
    async def list_keys(request: Request) -> Response:
        check_admin(gw, request.headers)
        keys = [public(k) for k in await gw.key_store.list()]
        return Response(orjson.dumps({"object": "list", "data": keys}), media_type=JSON)

    @app.post("/admin/keys", include_in_schema=False)
    async def create_key(request: Request) -> Response:
        check_admin(gw, request.headers)
        spec = parse_new_key(await request.body())
        key_id, secret = new_secret()
        key = spec.key(key_id)
        await gw.key_store.create(key, secret)
        log.info("admin created key_id=%s tenant=%s", key_id, key.tenant)
        return Response(orjson.dumps({**public(key), "secret": secret}), 201, media_type=JSON)

    @app.delete("/admin/keys/{key_id}", include_in_schema=False)
    async def revoke_key(key_id: str, request: Request) -> Response:
        check_admin(gw, request.headers)
        revoked = await gw.key_store.revoke(key_id)
        gw.auth.keys_changed()  # this gateway serves the revoked key no more, before it answers
        if not revoked:
            raise NotFound(f"no key with id {key_id}")
        log.info("admin revoked key_id=%s", key_id)
        return Response(orjson.dumps({"id": key_id, "revoked": True}), media_type=JSON)
