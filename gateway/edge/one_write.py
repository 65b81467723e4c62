"""uvicorn's httptools protocol with one write per response: the head is held back and goes out with
the first body message (a non-streamed answer leaves in a single ``send`` system call, not two).

uvicorn writes the status line and headers when the application sends ``http.response.start`` and
the body on each ``http.response.body``. Here each request's cycle writes through a
:class:`HeldHead` that keeps the head's bytes until the next write (or a close) and writes both
together. Each request's scope also carries, under :data:`GONE`, a future that resolves when the
client's connection is lost (what uvicorn's ``receive`` would report as ``http.disconnect``), so the
request path can watch the client without a task of its own. Everything else (keep-alive,
pipelining, flow control, disconnects, limits, the graceful shutdown) is uvicorn's own code,
unchanged.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from gateway.values import GONE


class HeldHead:
    """The connection's transport as one request's cycle sees it: once :meth:`hold` is called, the
    next write is kept and sent ahead of the write after it (or when the transport closes)."""

    __slots__ = ("held", "holding", "transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.holding = False
        self.held = b""

    def hold(self) -> None:
        self.holding = True

    def write(self, data: bytes) -> None:
        if self.holding:
            self.holding, self.held = False, self.held + data
            return
        if self.held:
            data, self.held = self.held + data, b""
        self.transport.write(data)

    def flush(self) -> None:
        """Write a held head that no body followed (a HEAD request, an empty chunked end)."""
        self.holding = False
        if self.held:
            data, self.held = self.held, b""
            if not self.transport.is_closing():
                self.transport.write(data)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def held(cycle: RequestResponseCycle) -> HeldHead:
    transport: Any = cycle.transport
    return transport  # type: ignore[no-any-return]


class OneWriteCycle(RequestResponseCycle):
    """uvicorn's request/response cycle whose head leaves with the first body write (its transport
    is a :class:`HeldHead`)."""

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            held(self).hold()
            await super().send(message)
            return
        await super().send(message)
        if not message.get("more_body", False) or self.scope["method"] == "HEAD":
            held(self).flush()


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose cycles write each response's head with its body."""

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        cycle.__class__ = OneWriteCycle
        cycle.transport = HeldHead(cycle.transport)  # type: ignore[assignment]
        cycle.scope[GONE] = self.loop.create_future()  # type: ignore[literal-required]
        super()._start_asgi_task(cycle, app)

    def connection_lost(self, exc: Exception | None) -> None:
        cycle = self.cycle
        super().connection_lost(exc)
        gone = cycle.scope.get(GONE) if cycle is not None and cycle.disconnected else None
        if isinstance(gone, asyncio.Future) and not gone.done():
            gone.set_result(None)
