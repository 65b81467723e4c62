"""The proxied endpoints as plain ASGI, ahead of FastAPI's router and dependency machinery.

The same routes are also declared to FastAPI (for the OpenAPI document and as a fallback);
both go through :meth:`Proxy.respond`, so there is one request path. What is proxied is the
allow-list of gateway/endpoints.py; every other path falls through to FastAPI (404 when unknown).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.endpoints import RESPONSES, match
from gateway.errors import NotFound, error_response
from gateway.proxy import Proxy


class FastPath:
    def __init__(self, app: ASGIApp, proxy: Proxy) -> None:
        self.app, self.proxy = app, proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        found = match(scope["method"], path) if scope["type"] == "http" else None
        if found is None and scope["type"] == "http" and path.startswith(RESPONSES):
            # vLLM's other /v1/responses/... paths (render): 404, not the 405 of the {response_id} route
            await error_response(NotFound("no such path; see /v1/models and the OpenAI API"))(
                scope, receive, send
            )
            return
        if found is None:
            await self.app(scope, receive, send)
            return
        response = await self.proxy.respond(scope, receive, *found)
        await response(scope, receive, send)
