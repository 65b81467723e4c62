"""The two responses of the proxied path, lean versions of Starlette's for the hot path.

:class:`WholeResponse` is a relayed non-streamed answer with its headers built directly.
:class:`RelayResponse` is a relayed stream: where the server protocol provides the client's disconnect
future (gateway/edge/one_write.py) the stream is watched through it (a callback that cancels the sending
task) instead of Starlette's task group with a second task reading ``receive``; elsewhere it is
Starlette's StreamingResponse unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.flow_control import FlowControl

from gateway.pipeline.pace import ClientPace, SlowClient
from gateway.values import ABORT, FLOW, GONE


class WholeResponse(Response):
    """The bytes Starlette's ``Response(body, status, {"x-request-id": ...}, media_type=...)`` sends
    (x-request-id, content-length, content-type with a charset for text/*), without its generic
    header handling; ``extra`` headers (the key's ``x-ratelimit-*``) follow x-request-id.

    ``after`` (a relayed answer's settle: its lease released, its unused tokens refunded, the request
    recorded) runs once the body is written, in the same task, also when the send failed or was
    cancelled (the client left): the client does not wait for its Redis round trips. A response that is
    not sent (kept by an idempotency key or a background run that failed) is settled with :meth:`settle`,
    which runs ``after`` once whoever calls it first."""

    def __init__(
        self,
        body: bytes,
        status: int,
        request_id: str,
        media_type: str,
        extra: tuple[tuple[str, str], ...] = (),
        after: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.status_code, self.body, self.background, self.after = status, body, None, after
        if media_type.startswith("text/") and "charset=" not in media_type.lower():
            media_type += "; charset=utf-8"
        self.raw_headers = [(b"x-request-id", request_id.encode("latin-1"))]
        self.raw_headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in extra]
        if status >= 200 and status not in (204, 304):
            self.raw_headers.append((b"content-length", str(len(body)).encode()))
        self.raw_headers.append((b"content-type", media_type.encode("latin-1")))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(
                {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            )
            await send({"type": "http.response.body", "body": self.body})
        finally:
            await self.settle()

    async def settle(self) -> None:
        """Run ``after`` (once: a second call, or one after the send, does nothing)."""
        after, self.after = self.after, None
        if after is not None:
            await after()


class RelayResponse(StreamingResponse):
    """A stream whose client, when it leaves, cancels the sending (the relay's generator ends at its
    current await: the upstream request is closed and the lease released). A client that makes no write
    progress for ``write_timeout_s`` (the server's flow control holds the send), or that takes less than
    ``min_rate`` bytes a second while the stream waits for it (gateway/pipeline/pace.py), is treated the
    same: its connection is dropped and ``on_stalled`` called with the reason. While a send waits, nothing
    more is read from the replica (gateway/upstream/http1.py stops reading past a bounded buffer)."""

    write_timeout_s: float = 30.0
    min_rate: int = 0
    on_stalled: Callable[[str], None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = scope.get(GONE)
        if not isinstance(gone, asyncio.Future):
            await super().__call__(scope, receive, send)
            return
        task = asyncio.current_task()
        assert task is not None
        cut = over = False

        def leave(_: asyncio.Future[None]) -> None:
            nonlocal cut
            if not cut and not over:
                cut = True
                task.cancel()

        gone.add_done_callback(leave)
        try:
            await self.relay(send, scope.get(FLOW))
        except asyncio.CancelledError:
            if not cut or task.uncancel() > 0:  # cancelled from outside too: let that through
                raise
        except (TimeoutError, SlowClient) as exc:  # no write progress, or too little: drop the client
            cut = True
            scope[ABORT]()
            if self.on_stalled is not None:
                self.on_stalled(self.stall_reason(exc))
        finally:
            over = True
            gone.remove_done_callback(leave)
            # cut, failed or done: end the generator (its cleanup releases the lease; a no-op once done)
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()

    async def relay(self, send: Send, flow: FlowControl | None) -> None:
        """Starlette's ``stream_response`` (the chunks are bytes), with each send that has to wait for
        the client bounded by ``write_timeout_s`` and the client's pace judged by ``min_rate``."""
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        clock = asyncio.get_running_loop().time
        pace = ClientPace(self.write_timeout_s, self.min_rate, clock())
        async for chunk in self.body_iterator:
            message = {"type": "http.response.body", "body": chunk, "more_body": True}
            waited = 0.0
            if flow is not None and flow.write_paused:
                before = clock()
                async with asyncio.timeout(self.write_timeout_s):
                    await send(message)
                waited = clock() - before
            else:
                await send(message)
            pace.sent(len(chunk), waited, clock())
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def stall_reason(self, exc: BaseException) -> str:
        if isinstance(exc, SlowClient):
            return (
                f"the client took {exc.rate:.0f} bytes/s while the stream waited for it (the minimum:"
                f" {self.min_rate} bytes/s over {self.write_timeout_s:g} s): stream ended"
            )
        return f"the client read nothing for {self.write_timeout_s:g} s: stream ended"
