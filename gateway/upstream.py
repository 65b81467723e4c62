"""Step 6, forward: one lifespan-owned HTTP client; failures sorted into retryable or final.

A replica that fails before the first byte reached the client (connection error, timeout,
5xx) raises :class:`Retryable`; anything the replica answered with a 4xx is the client's
and passes through untouched.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

from gateway.errors import GatewayError, UpstreamError, UpstreamTimeout

NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


class Retryable(Exception):
    """The replica failed before the client saw a byte; another replica may serve the request."""

    def __init__(self, error: GatewayError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(slots=True)
class Upstream:
    """An upstream response whose status is known and, for a 200 stream, whose first chunk arrived."""

    response: httpx.Response
    chunks: AsyncIterator[bytes]
    first: bytes


def make_client(connect_timeout_s: float, max_connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    transport = httpx.AsyncHTTPTransport(limits=limits, socket_options=NODELAY, retries=0)
    timeout = httpx.Timeout(connect=connect_timeout_s, read=None, write=30.0, pool=connect_timeout_s)
    return httpx.AsyncClient(transport=transport, timeout=timeout)


def classify(exc: Exception, url: str) -> Retryable:
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return Retryable(UpstreamTimeout(f"the replica at {url} did not answer in time"))
    return Retryable(UpstreamError(f"the replica at {url} failed: {type(exc).__name__}"))


async def open_stream(
    client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str], first_byte_s: float
) -> Upstream:
    """Send the request and wait for the status and the first chunk, within the first-byte timeout."""
    request = client.build_request("POST", url, content=body, headers=headers)
    response: httpx.Response | None = None
    try:
        async with asyncio.timeout(first_byte_s):
            response = await client.send(request, stream=True)
            chunks = response.aiter_raw()
            first = await anext(chunks, b"")
    except (httpx.HTTPError, TimeoutError, OSError) as exc:
        if response is not None:
            await response.aclose()
        raise classify(exc, url) from None
    if response.status_code >= 500:
        await response.aclose()
        raise Retryable(UpstreamError(f"the replica at {url} answered {response.status_code}"))
    return Upstream(response, chunks, first)


async def read_rest(up: Upstream, chunk_s: float) -> bytes:
    """The whole body of a non-streamed answer."""
    parts = [up.first]
    try:
        async with asyncio.timeout(chunk_s):
            parts.extend([c async for c in up.chunks])
    except (httpx.HTTPError, TimeoutError, OSError) as exc:
        raise classify(exc, str(up.response.request.url)) from None
    finally:
        await up.response.aclose()
    return b"".join(parts)


async def next_chunk(chunks: AsyncIterator[bytes], chunk_s: float) -> bytes:
    """The next streamed chunk, b'' at the end; raises on a broken or stalled stream."""
    async with asyncio.timeout(chunk_s):
        return await anext(chunks, b"")
