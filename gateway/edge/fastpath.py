"""The proxied endpoints as plain ASGI, ahead of FastAPI: :class:`GatewayApp` is the FastAPI
application whose ``__call__`` hands the paths of the allow-list (gateway/endpoints.py) straight to
:meth:`Proxy.respond`, with no Starlette middleware, router or dependency machinery in between.

The same routes are also declared to FastAPI (for the OpenAPI document and as a fallback); both go
through :meth:`Proxy.respond`, so there is one request path. The per-model base paths
(``/models/{model}/...``, gateway/endpoints.py ``match_scoped``) are served here only. Every other
path (admin, docs, OpenAPI, health) goes to FastAPI (404 when unknown).
"""

from __future__ import annotations

import contextlib
import logging

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from gateway.endpoints import RESPONSES, Route, match, match_scoped
from gateway.errors import InternalError, NotFound, error_response
from gateway.pipeline.proxy import Proxy

log = logging.getLogger("llmgw.fastpath")


class GatewayApp(FastAPI):
    """FastAPI with the proxied paths served first, by ``proxy`` (set once the proxy is built)."""

    proxy: Proxy | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.proxy is None:
            await super().__call__(scope, receive, send)
            return
        path = scope["path"]
        found = match(scope["method"], path)
        if found is not None:
            await serve(self.proxy, scope, receive, send, *found)
        elif (scoped := match_scoped(scope["method"], path)) is not None:
            await serve(self.proxy, scope, receive, send, scoped[0], "", scoped[1])
        elif path.startswith(RESPONSES):
            # vLLM's other /v1/responses/... paths (render): 404, not the 405 of the {response_id} route
            await error_response(NotFound("no such path; see /v1/models and the OpenAI API"))(
                scope, receive, send
            )
        else:
            await super().__call__(scope, receive, send)


async def serve(
    proxy: Proxy,
    scope: Scope,
    receive: Receive,
    send: Send,
    route: Route,
    response_id: str,
    path_model: str = "",
) -> None:
    """One proxied request (``path_model``: the model of a per-model base path). ``respond`` never
    raises; should sending its response fail before it started, the client still gets the API's error
    shape (a started response is cut: the server closes the connection, as Starlette's error middleware
    would)."""
    response = await proxy.respond(scope, receive, route, response_id, path_model)
    try:
        await response(scope, receive, send)
    except Exception as exc:
        log.error("unexpected error sending a response: %r", exc, exc_info=exc)
        with contextlib.suppress(RuntimeError):  # already started: uvicorn refuses a second start
            await error_response(InternalError("the gateway failed to serve this request"))(
                scope, receive, send
            )
