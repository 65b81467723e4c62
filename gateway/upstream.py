"""Step 6, forward: one lifespan-owned connection pool; failures sorted into retryable or final.

A replica that fails before the first byte reached the client (connection error, timeout,
5xx) raises :class:`Retryable`; anything the replica answered with a 4xx is the client's
and passes through untouched.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gateway.errors import GatewayError, UpstreamError, UpstreamTimeout
from gateway.http1 import ConnectionPool, Response, UpstreamClosed

FAILURES = (OSError, UpstreamClosed, TimeoutError)


class Retryable(Exception):
    """The replica failed before the client saw a byte; another replica may serve the request."""

    def __init__(self, error: GatewayError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(slots=True)
class Upstream:
    """An upstream response whose status is known and whose first chunk arrived."""

    response: Response
    first: bytes

    @property
    def status(self) -> int:
        return self.response.status

    @property
    def content_type(self) -> str:
        return self.response.header(b"content-type", b"application/json").decode("latin-1")


def classify(exc: BaseException, url: str) -> Retryable:
    if isinstance(exc, TimeoutError):
        return Retryable(UpstreamTimeout(f"the replica at {url} did not answer in time"))
    return Retryable(UpstreamError(f"the replica at {url} failed: {type(exc).__name__}"))


async def open_stream(
    pool: ConnectionPool,
    url: str,
    path: bytes,
    body: bytes,
    headers: list[tuple[bytes, bytes]],
    first_byte_s: float,
    method: bytes = b"POST",
) -> Upstream:
    """Send the request and wait for the status and the first chunk, within the first-byte timeout."""
    origin, prefix = pool.origin(url)
    response: Response | None = None
    try:
        async with asyncio.timeout(first_byte_s):
            response = await origin.post(prefix + path, headers, body, method)
            first = await response.next_chunk()
    except FAILURES as exc:
        if response is not None:
            response.close()
        raise classify(exc, url) from None
    if response.status >= 500:
        response.close()
        raise Retryable(UpstreamError(f"the replica at {url} answered {response.status}"))
    return Upstream(response, first)


async def read_rest(up: Upstream, chunk_s: float, url: str) -> bytes:
    """The whole body of a non-streamed answer."""
    if not up.first:
        return b""
    try:
        async with asyncio.timeout(chunk_s):
            rest = await up.response.read()
    except FAILURES as exc:
        up.response.close()
        raise classify(exc, url) from None
    return up.first + rest if rest else up.first


async def next_chunk(up: Upstream, chunk_s: float) -> bytes:
    """The next streamed chunk, b'' at the end; raises on a broken or stalled stream."""
    async with asyncio.timeout(chunk_s):
        return await up.response.next_chunk()
