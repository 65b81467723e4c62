"""Exact usage for every stream: the gateway asks the engine for the usage event
(``stream_options.include_usage``) on each streamed chat or completion, so its token limits, refunds,
fair share and tenant metrics count what the engine counted; when the client did not ask for it, the
usage event is taken out of what the client receives, so the client sees the same stream as without
the gateway.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

USAGE_OPTION_APIS = frozenset({"chat/completions", "completions"})
ASK = b'"stream_options":{"include_usage":true},'
EVENT_END = re.compile(rb"(\r?\n\r?\n)")


def ask_usage(payload: dict[str, Any], body: bytes) -> tuple[bytes, bool]:
    """The body to forward and whether the usage event is the gateway's own (to be taken out): the
    body unchanged when the client asked for usage (or sent stream_options vLLM will refuse)."""
    if "stream_options" not in payload:  # the common case: one insertion, no re-encoding
        at = body.find(b"{") + 1
        return body[:at] + ASK + body[at:], True
    options = payload["stream_options"]
    if options is None:
        options = {}
    if not isinstance(options, dict) or options.get("include_usage"):
        return body, False
    return orjson.dumps({**payload, "stream_options": {**options, "include_usage": True}}), True


def is_usage_event(event: bytes) -> bool:
    """The event the engine adds for include_usage: no choices, a usage object."""
    if b'"usage"' not in event:
        return False
    start = event.find(b"data:")
    try:
        data = orjson.loads(event[start + 5 :]) if start >= 0 else None
    except orjson.JSONDecodeError:
        return False
    return isinstance(data, dict) and data.get("choices") == [] and isinstance(data.get("usage"), dict)


class UsageStrip:
    """Passes a stream through whole events, less the usage event; an incomplete event waits for its
    end (the engine writes one event per chunk, so nothing usually waits)."""

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, chunk: bytes) -> bytes:
        if not self.pending and chunk.endswith(b"\n\n") and b'"usage"' not in chunk:
            return chunk  # the common case: one whole event that is not the usage event
        data = self.pending + chunk if self.pending else chunk
        lf, crlf = data.rfind(b"\n\n"), data.rfind(b"\r\n\r\n")
        end = max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)
        if not end:
            self.pending = data
            return b""
        out, self.pending = data[:end], data[end:]
        if b'"usage"' not in out:
            return out
        parts = EVENT_END.split(out)  # event, its end, event, its end, ..., b""
        pairs = zip(parts[0::2], parts[1::2], strict=False)
        return b"".join(event + sep for event, sep in pairs if not is_usage_event(event))

    def rest(self) -> bytes:
        """What waited for an end that never came (a stream that broke, or ended without one)."""
        rest, self.pending = self.pending, b""
        return rest
