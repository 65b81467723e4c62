"""uvicorn's httptools protocol with one write per response: the head is held back and goes out with
the first body message (a non-streamed answer leaves in a single ``send`` system call, not two).

uvicorn writes the status line and headers when the application sends ``http.response.start`` and
the body on each ``http.response.body``. Here each request's cycle writes through a
:class:`HeldHead` that keeps the head's bytes until the next write (or a close) and writes both
together. Each request's scope also carries, under :data:`GONE`, a future that resolves when the
client's connection is lost (what uvicorn's ``receive`` would report as ``http.disconnect``), so the
request path can watch the client without a task of its own.

The protocol is also the door (:func:`door_protocol`): before a request reaches the application (and
authentication), its request line and headers together may take at most ``max_head_bytes`` (more: 431,
and never more than that is given to the parser, so nothing past the limit is buffered) and must arrive
within ``header_timeout_s`` of the read that left it incomplete, or of the connection (late: 408).
While the connection's writes are paused (its client does not read), the client must take something of
what was written within ``send_timeout_s``, or the connection is dropped (nginx's ``send_timeout``):
uvicorn waits for a paused connection without bound before every send, the head's included.
Both answers are the API's error shape, with ``connection: close``; what the client still sends is read
and dropped for a moment (a lingering close, as nginx's), so that it can read the answer. A response
sent before its request's body was all read (the application refused it from the head: a bad key, or
the body came too slowly) closes the connection the same way, instead of reading the rest of the body
to keep the connection. Everything else (keep-alive, pipelining, flow control, disconnects, the
graceful shutdown) is uvicorn's own code.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from gateway.errors import GatewayError, HeadTimeout, HeadTooLarge, error_bytes
from gateway.settings import GatewaySettings
from gateway.values import ABORT, FLOW, GONE

log = logging.getLogger("llmgw.edge")
LINGER_S = 2.0
"""How long a refused connection's further input is read and dropped before it is closed."""


class HeldHead:
    """The connection's transport as one request's cycle sees it: once :meth:`hold` is called, the
    next write is kept and sent ahead of the write after it (or when the transport closes). With
    ``lingering`` set, closing it is the protocol's lingering close (``linger``)."""

    __slots__ = ("held", "holding", "linger", "lingering", "transport")

    def __init__(self, transport: asyncio.Transport, linger: Callable[[], None]) -> None:
        self.transport = transport
        self.linger = linger
        self.holding = self.lingering = False
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
        if self.lingering:
            self.linger()
        else:
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
    is a :class:`HeldHead`). A response that starts before the request's body was all received ends
    the connection (``connection: close``, then a lingering close)."""

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            if self.more_body and not self.disconnected:  # the rest of the body is never read
                self.keep_alive = False
                held(self).lingering = True
            held(self).hold()
            await super().send(message)
            return
        await super().send(message)
        if not message.get("more_body", False) or self.scope["method"] == "HEAD":
            held(self).flush()


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose cycles write each response's head with its body, with the
    door's limits on each request's head."""

    max_head_bytes = 64 * 1024
    header_timeout_s = 10.0
    head_bytes = 0
    head_done = False
    refused = False
    head_timer: asyncio.TimerHandle | None = None
    send_timeout_s = 60.0
    send_timer: asyncio.TimerHandle | None = None
    unsent = 0
    """The bytes waiting in the transport's buffer when the send clock last started."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that sends nothing gets its 408 too

    def _arm(self) -> None:
        """Start the head's clock (a head that arrives whole in one read never needs one)."""
        if self.head_timer is None:
            self.head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.head_done:  # the next request on this connection: its own head
            self.head_bytes, self.head_done = 0, False

    def on_headers_complete(self) -> None:
        self.head_done = True
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # lingering: read and dropped
        if self.head_done:
            super().data_received(data)
            if not self.head_done:  # the next request's head began in this read and is not whole
                self._arm()
            return
        room = self.max_head_bytes - self.head_bytes
        if len(data) <= room:
            self.head_bytes += len(data)
            super().data_received(data)
            if not self.head_done:
                self._arm()
            return
        self.head_bytes = self.max_head_bytes
        super().data_received(data[:room])  # the parser never holds more than the limit
        if self.head_done and not self.transport.is_closing():
            super().data_received(data[room:])
        elif not self.head_done:
            limit = f"{self.max_head_bytes // 1024} KiB"
            self._refuse(HeadTooLarge(f"the request line and headers are over the limit of {limit}"))

    def _head_timed_out(self) -> None:
        self.head_timer = None
        if not self.head_done and not self.refused:
            wait = f"{self.header_timeout_s:g} s"
            self._refuse(HeadTimeout(f"the request line and headers did not arrive within {wait}"))

    def _refuse(self, err: GatewayError) -> None:
        """Answer ``err`` at the door and close, after a lingering read of what the client still sends."""
        self.refused = True
        if self.transport.is_closing():
            return
        body = error_bytes(err)
        head = f"HTTP/1.1 {err.status} {REASONS[err.status]}\r\ncontent-type: application/json\r\n"
        head += f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        self.transport.write(head.encode() + body)
        self.linger()

    def linger(self) -> None:
        """Close after what was written, reading and dropping what the client still sends for
        :data:`LINGER_S` (so that it reads the answer instead of a reset)."""
        self.refused = True
        if self.transport.is_closing():
            return
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._watch_send()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._unwatch_send()

    def _watch_send(self) -> None:
        """Start the send clock on what the transport holds now."""
        self._unwatch_send()
        self.unsent = self.transport.get_write_buffer_size()
        self.send_timer = self.loop.call_later(self.send_timeout_s, self._send_timed_out)

    def _unwatch_send(self) -> None:
        if self.send_timer is not None:
            self.send_timer.cancel()
            self.send_timer = None

    def _send_timed_out(self) -> None:
        """The client took nothing for ``send_timeout_s``: drop it; else start the clock again."""
        self.send_timer = None
        if self.transport.is_closing() or not self.flow.write_paused:
            return
        if self.transport.get_write_buffer_size() < self.unsent:
            self._watch_send()
            return
        log.warning(
            "connection dropped: its client took nothing for %g s (send_timeout_s)", self.send_timeout_s
        )
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._unwatch_send()
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        cycle = self.cycle
        super().connection_lost(exc)
        gone = cycle.scope.get(GONE) if cycle is not None and cycle.disconnected else None
        if isinstance(gone, asyncio.Future) and not gone.done():
            gone.set_result(None)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        cycle.__class__ = OneWriteCycle
        cycle.transport = HeldHead(cycle.transport, self.linger)  # type: ignore[assignment]
        cycle.scope[GONE] = self.loop.create_future()  # type: ignore[literal-required]
        cycle.scope[FLOW] = self.flow  # type: ignore[literal-required]
        cycle.scope[ABORT] = self.transport.abort  # type: ignore[literal-required]
        super()._start_asgi_task(cycle, app)


REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large"}


def door_protocol(settings: GatewaySettings) -> type[OneWriteProtocol]:
    """The server protocol with this gateway's limits at the door."""
    limits = {
        "max_head_bytes": settings.max_head_bytes,
        "header_timeout_s": settings.header_timeout_s,
        "send_timeout_s": settings.send_timeout_s,
    }
    return type("DoorProtocol", (OneWriteProtocol,), limits)
