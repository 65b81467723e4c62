"""The proxied endpoints as plain ASGI, ahead of FastAPI's router and dependency machinery.

The same routes are also declared to FastAPI (for the OpenAPI document and as a fallback);
both go through :meth:`Proxy.respond`, so there is one request path.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.proxy import Proxy

PROXIED = ("chat/completions", "completions", "embeddings")
PATHS = {f"/v1/{e}": e for e in PROXIED}


class FastPath:
    def __init__(self, app: ASGIApp, proxy: Proxy) -> None:
        self.app, self.proxy = app, proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = PATHS.get(scope.get("path", "")) if scope["type"] == "http" else None
        if endpoint is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        response = await self.proxy.respond(scope, receive, endpoint)
        await response(scope, receive, send)
