"""One error hierarchy, mapped in one place to the error body of the API the client called.

Every failure the gateway reports is a :class:`GatewayError`; :func:`error_response` and
:func:`sse_error_event` are the only places that turn one into bytes on the wire: OpenAI's
``{"error": {"message", "type", "param", "code"}}``, or on Anthropic's ``/v1/messages`` its
``{"type": "error", "error": {"type", "message"}}``.

Every error answer carries the retry hint the official SDKs act on (``x-should-retry``, which
overrides their own guess by status): ``true`` with ``retry-after-ms`` and ``retry-after`` for an error
made before any replica saw the request (429 admission and rate limits, 503 waking or no replica
ready), ``false`` for everything else, above all an error after the request reached a replica (a 502
or 504): the generation may have run, and a retry would run it again.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import orjson
from starlette.responses import Response


class GatewayError(Exception):
    status: ClassVar[int] = 500
    type: ClassVar[str] = "server_error"
    code: ClassVar[str | None] = None
    retry: ClassVar[bool] = False
    """True for errors made before any replica saw the request: a retry cannot run a generation twice."""

    def __init__(self, message: str, *, param: str | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.retry_after = retry_after

    def body(self) -> dict[str, dict[str, str | None]]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def headers(self) -> dict[str, str]:
        """The retry hint: ``x-should-retry`` always; when true, also when (1 s unless the error says)."""
        if not self.retry:
            return {"x-should-retry": "false"}
        after = 1.0 if self.retry_after is None else max(0.001, self.retry_after)
        return {
            "x-should-retry": "true",
            "retry-after-ms": str(round(after * 1000)),
            "retry-after": str(max(1, round(after))),
        }


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class BodyTooLarge(InvalidRequest):
    status = 413
    code = "request_too_large"


class MediaUrlRefused(InvalidRequest):
    code = "media_url_not_allowed"


class HeadTooLarge(InvalidRequest):
    status = 431
    code = "request_header_fields_too_large"


class HeadTimeout(InvalidRequest):
    status = 408
    code = "request_timeout"


class BodyTimeout(HeadTimeout):
    """The request body came too slowly (nothing was forwarded: a retry is safe)."""

    retry = True


class Unauthorized(GatewayError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class KeyStoreUnavailable(GatewayError):
    """The API key could not be verified: its key store does not answer and the key was not verified
    lately. The key may well be valid: retry."""

    status = 503
    type = "service_unavailable"
    code = "key_store_unavailable"
    retry = True


class Forbidden(GatewayError):
    status = 403
    type = "permission_error"
    code = "model_not_allowed"


class ModelNotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class MethodNotAllowed(GatewayError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class Conflict(GatewayError):
    status = 409
    type = "invalid_request_error"
    code = "conflict"


class IdempotencyKeyReused(GatewayError):
    """An ``Idempotency-Key`` sent again with another body (or to another endpoint): refused, never run."""

    status = 422
    type = "invalid_request_error"
    code = "idempotency_key_reused"


class IdempotencyKeyInUse(Conflict):
    """The request that holds an ``Idempotency-Key`` still runs past this one's wait: nothing ran for this
    one, a retry attaches again."""

    code = "idempotency_key_in_use"
    retry = True


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"
    retry = True


class QueueFull(RateLimited):
    code = "queue_full"


class QueueTimeout(RateLimited):
    code = "queue_timeout"


class ClientClosedRequest(GatewayError):
    """The client went away while its request waited (nginx's 499); nobody reads the answer."""

    status = 499
    type = "invalid_request_error"
    code = "client_closed_request"


class NoReadyReplica(GatewayError):
    status = 503
    type = "service_unavailable"
    code = "no_ready_replica"
    retry = True


class ModelUnavailable(NoReadyReplica):
    """Every replica of the model is failed: answered at once, naming the failure."""

    code = "model_unavailable"


class WakeTimeout(NoReadyReplica):
    """An on-demand model did not wake within its ``wake_timeout_s``."""

    code = "wake_timeout"


class ColdStartTooLong(NoReadyReplica):
    """The model is at zero replicas and its measured cold start is longer than the request may wait:
    answered at once, with the ETA as Retry-After."""

    code = "model_starting_from_zero"


class ShuttingDown(GatewayError):
    """The gateway is stopping and ended a request that outlived its grace period; retry it."""

    status = 503
    type = "service_unavailable"
    code = "gateway_shutting_down"
    retry = True


class UpstreamError(GatewayError):
    status = 502
    type = "upstream_error"
    code = "upstream_error"


class ReplicaError(GatewayError):
    """The replica answered a server error after it took the request (its work may have run): passed
    through, never retried."""

    status = 500
    type = "server_error"
    code = "replica_error"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class ResponseNotFound(NotFound):
    """A stored response (Responses API) that no gateway has a record of."""

    code = "response_not_found"


class ResponseReplicaGone(NotFound):
    """The replica that holds a stored response has left (or restarted): the response is lost."""

    code = "response_replica_gone"


class InternalError(GatewayError):
    """Anything unexpected: reported without a stack trace, logged with one."""


Dialect = Literal["openai", "anthropic"]
# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors).
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def anthropic_body(err: GatewayError) -> dict[str, object]:
    kind = ANTHROPIC_TYPES.get(err.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": err.message}}


def error_bytes(err: GatewayError, dialect: Dialect = "openai") -> bytes:
    return orjson.dumps(anthropic_body(err) if dialect == "anthropic" else err.body())


def error_response(err: GatewayError, dialect: Dialect = "openai") -> Response:
    return Response(error_bytes(err, dialect), err.status, err.headers(), media_type="application/json")


def sse_error_event(err: GatewayError, dialect: Dialect = "openai") -> bytes:
    """The planned end of a stream that broke after it started: one error event, then [DONE]
    (Anthropic's streams end with an ``event: error`` instead)."""
    if dialect == "anthropic":
        return b"event: error\ndata: " + error_bytes(err, dialect) + b"\n\n"
    return b"data: " + error_bytes(err) + b"\n\ndata: [DONE]\n\n"
