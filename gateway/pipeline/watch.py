"""The one cancel-on-disconnect scope of the request path.

A request is watched from admission to its answer by one future that ends when the client leaves: the
server's own disconnect future (gateway/edge/one_write.py) or, elsewhere, a task reading ``receive``.
:func:`watched` runs one step under that watch in the request's own task (no task per step): if the
client leaves first, or the stopping gateway ends its open requests, the step is cancelled (which
leaves the queue, or closes the upstream connection so vLLM aborts the request) and the cancellation
becomes the :class:`~gateway.errors.GatewayError` the client is answered with. A started stream is
watched by its response (gateway/pipeline/replies.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.types import Receive

from gateway.errors import ClientClosedRequest, GatewayError, ShuttingDown
from gateway.shutdown import OpenRequests

T = TypeVar("T")


async def disconnected(receive: Receive) -> None:
    """Returns when the client has gone away (the body was already read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class client_watch:
    """The request's one watch: the server's disconnect future ``gone``, else a task reading ``receive``
    for as long as the scope lasts. (A class, not a generator-based context manager: it is entered once
    per request.)"""

    __slots__ = ("gone", "receive", "watch")

    def __init__(self, receive: Receive, gone: asyncio.Future[None] | None) -> None:
        self.receive, self.gone = receive, gone
        self.watch: asyncio.Future[None] | None = None

    def __enter__(self) -> asyncio.Future[None]:
        self.watch = self.gone if self.gone is not None else asyncio.ensure_future(disconnected(self.receive))
        return self.watch

    def __exit__(self, *_: object) -> None:
        if self.watch is not None and self.watch is not self.gone:
            self.watch.cancel()


async def watched(
    work: Awaitable[T], watch: asyncio.Future[None], left: str, open_requests: OpenRequests | None = None
) -> T:
    """``work``'s result, unless the client leaves first (``watch`` ends: ClientClosedRequest with the
    message ``left``) or, with ``open_requests``, the stopping gateway ends the request (ShuttingDown,
    503 with Retry-After). A cancellation from outside passes through unchanged."""
    current = asyncio.current_task()
    assert current is not None
    why: list[GatewayError] = []
    over = False

    def end(reason: GatewayError) -> None:
        if not why and not over:  # a callback already scheduled may run after the work ended
            why.append(reason)
            current.cancel()

    def gone(_: asyncio.Future[None]) -> None:
        end(ClientClosedRequest(left))

    watch.add_done_callback(gone)
    token = None
    if open_requests is not None:
        token = open_requests.open(
            lambda: end(ShuttingDown("the gateway is shutting down; retry the request", retry_after=1.0))
        )
    try:
        return await work
    except asyncio.CancelledError:
        if not why or current.uncancel() > 0:  # cancelled from outside too: let that through
            raise
        raise why[0] from None
    finally:
        over = True
        watch.remove_done_callback(gone)
        if open_requests is not None and token is not None:
            open_requests.close(token)
