"""Around step 1: what the request path reads of a request: the headers any step looks at, its id, the
id the replica gets (before step 1), and its body (after step 1: refused as soon as it passes the size
limit, or when it comes too slowly)."""

from __future__ import annotations

import asyncio
import os

from starlette.types import Receive, Scope

from gateway.errors import BodyTimeout, BodyTooLarge, ClientClosedRequest

# The request headers any step reads; the rest are never looked at (nor forwarded).
WANTED_HEADERS = frozenset(
    {
        b"authorization",
        b"x-api-key",
        b"content-type",
        b"x-request-id",
        b"x-session-id",
        b"x-priority",
        b"x-max-wait-s",
        b"x-stainless-retry-count",
        b"idempotency-key",
        b"last-event-id",
        b"traceparent",
        b"tracestate",
    }
)


def wanted_headers(scope: Scope) -> dict[str, str]:
    return {k.decode(): v.decode("latin-1") for k, v in scope["headers"] if k in WANTED_HEADERS}


def request_id(headers: dict[str, str]) -> str:
    given = headers.get("x-request-id", "")
    if 0 < len(given) <= 128 and given.isprintable() and given.isascii():
        return given
    return os.urandom(16).hex()


def upstream_id(request_id: str, headers: dict[str, str]) -> str:
    """The id vLLM gets for the request: unique per gateway request, since vLLM uses it as its internal
    request id (two in flight with the same id collide). A client's id is kept readable (its first 64
    characters, anything but letters, digits and ``._:-`` as ``_``) with a random suffix; an id the
    gateway made is unique already."""
    if headers.get("x-request-id") != request_id:
        return request_id
    safe = "".join(c if c.isalnum() or c in "._:-" else "_" for c in request_id[:64])
    return f"{safe}-{os.urandom(6).hex()}"


async def read_body(receive: Receive, limit: int, timeout_s: float, min_rate: int) -> bytes:
    """The request body, refused as soon as it passes the limit (never buffered past it, 413), or when it
    has not all arrived within ``timeout_s`` plus its bytes so far at ``min_rate`` bytes a second (408)."""
    parts, size = [], 0
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            async with asyncio.timeout_at(deadline + size / min_rate):
                message = await receive()
        except TimeoutError:
            raise BodyTimeout(
                f"the request body did not arrive in time: {size} bytes came in "
                f"{timeout_s + size / min_rate:.1f} s (the limit: {timeout_s:g} s, then {min_rate} bytes/s)"
            ) from None
        if message["type"] == "http.disconnect":
            raise ClientClosedRequest("the client disconnected while sending the request")
        body = message.get("body", b"")
        size += len(body)
        if size > limit:
            raise BodyTooLarge(f"request body is over the limit of {limit} bytes")
        parts.append(body)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)
