"""Step 6, forward: one lifespan-owned connection pool; failures sorted into retryable or final.

Only what a replica refused before any work is retried (:class:`Retryable`): a connection error or a
timeout before the request was written, a 502 or 503 (vLLM draining, overloaded or asleep). A connection
that broke after the request was written is a :class:`Retryable` with ``written`` set, which the caller
never sends again (the replica may have begun the generation). Any other
5xx is :class:`Failed`: the replica took the request and its work may have run, so the error passes
through (in the API's shape, 500) and is never retried; it counts toward the replica's run of failures.
A timeout once the request was written raises :class:`Unanswered`: the replica may still be
generating, so it is neither retried (the generation would run twice) nor counted against the replica.
Anything the replica answered with a 4xx is the client's and passes through untouched.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import orjson

from gateway.errors import GatewayError, ReplicaError, UpstreamError, UpstreamTimeout
from gateway.upstream.http1 import ConnectionPool, Response, Sent, UpstreamClosed

FAILURES = (OSError, UpstreamClosed, TimeoutError)
REFUSED = frozenset({502, 503})
"""The 5xx a replica answers before any work (vLLM draining, overloaded or asleep): retried."""


class Retryable(Exception):
    """The replica failed the request: with ``written`` unset, before any work (another replica may serve
    it); ``answered``: it said so (a 502 or 503), which counts toward its run of failures instead of
    ejecting it at once. ``written``: the connection broke after the request was sent (the replica may
    have begun it): not sent again, the replica is ejected."""

    def __init__(self, error: GatewayError, answered: bool = False, written: bool = False) -> None:
        super().__init__(error.message)
        self.error, self.answered, self.written = error, answered, written


class Failed(Exception):
    """The replica answered a server error after it took the request: passed through, not retried."""

    def __init__(self, error: GatewayError) -> None:
        super().__init__(error.message)
        self.error = error


class Unanswered(Exception):
    """The replica has the request but did not answer in time: a 504 for the client, no retry, no ejection."""

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


def classify(exc: BaseException, url: str, written: bool = False) -> Retryable | Unanswered:
    """A timeout before the request was written (connect) is the replica's failure; after, it is not."""
    if isinstance(exc, TimeoutError):
        timeout = UpstreamTimeout(f"the replica at {url} did not answer in time")
        return Unanswered(timeout) if written else Retryable(timeout)
    if written:
        said = f"the replica at {url} closed the connection after the request was sent ({type(exc).__name__})"
        return Retryable(
            UpstreamError(f"{said}; it may have begun it, so it was not sent again"), written=True
        )
    return Retryable(UpstreamError(f"the replica at {url} failed: {type(exc).__name__}"))


async def open_stream(
    pool: ConnectionPool,
    url: str,
    path: bytes,
    body: bytes,
    headers: list[tuple[bytes, bytes]],
    wait_s: float,
    method: bytes = b"POST",
) -> Upstream:
    """Send the request and wait for the status and the first chunk, within ``wait_s`` (the first-byte
    timeout of a stream, what is left of the total deadline of a non-streamed request)."""
    origin, prefix = pool.origin(url)
    response: Response | None = None
    sent = Sent()
    try:
        async with asyncio.timeout(wait_s):
            response = await origin.post(prefix + path, headers, body, sent, method)
            first = await response.next_chunk()
    except FAILURES as exc:
        if response is not None:
            response.close()
        raise classify(exc, url, sent.written) from None
    except BaseException:  # cancelled (the client left): closing the connection aborts the request
        if response is not None:
            response.close()
        raise
    if response.status >= 500:
        response.close()
        said = f"the replica at {url} answered {response.status}"
        if response.status in REFUSED:
            raise Retryable(UpstreamError(said), answered=True)
        raise Failed(ReplicaError(f"{said}: {error_message(first)}"))
    return Upstream(response, first)


def error_message(body: bytes) -> str:
    """The message of an error body (OpenAI's ``{"error": {"message"}}`` or vLLM's ``{"message"}``)."""
    try:
        payload = orjson.loads(body)
        inner = payload.get("error", payload) if isinstance(payload, dict) else {}
        message = inner.get("message") if isinstance(inner, dict) else None
    except orjson.JSONDecodeError:
        message = None
    return str(message)[:500] if message else "no message"


async def read_rest(up: Upstream, wait_s: float, url: str) -> bytes:
    """The whole body of a non-streamed answer, within ``wait_s``."""
    if not up.first:
        return b""
    if up.response.arrived:  # a small answer came whole with its head: no wait, no timer
        rest = await up.response.read()
        return up.first + rest if rest else up.first
    try:
        async with asyncio.timeout(wait_s):
            rest = await up.response.read()
    except FAILURES as exc:
        up.response.close()
        raise classify(exc, url, written=True) from None
    except BaseException:
        up.response.close()
        raise
    return up.first + rest if rest else up.first


async def next_chunk(up: Upstream, chunk_s: float) -> bytes:
    """The next streamed chunk, b'' at the end; raises on a broken or stalled stream."""
    async with asyncio.timeout(chunk_s):
        return await up.response.next_chunk()
