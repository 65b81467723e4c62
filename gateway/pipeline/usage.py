"""Exact usage for every stream: the gateway asks the engine for the usage event
(``stream_options.include_usage``) on each streamed chat or completion, so its token limits, refunds,
fair share and tenant metrics count what the engine counted; when the client did not ask for it, the
usage event is taken out of what the client receives, so the client sees the same stream as without
the gateway.
"""

from __future__ import annotations

from typing import Any

import orjson

USAGE_OPTION_APIS = frozenset({"chat/completions", "completions"})
USAGE_KEY = b'"usage"'


def asks_usage(payload: dict[str, Any]) -> bool:
    """Whether the gateway asks the usage event itself (the client did not; gateway/pipeline/body.py
    adds ``include_usage``): not when the client asked it, or sent stream_options vLLM will refuse."""
    options = payload.get("stream_options")
    if "stream_options" not in payload or options is None:
        return True
    return isinstance(options, dict) and not options.get("include_usage")


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


def without_usage_events(block: bytes) -> bytes:
    """``block`` (whole events) less its usage events. Only the events that name ``"usage"`` are cut
    out and checked, found from the block's end (the usage event is one of the last); the bytes between
    them are kept as they came, not split into events (a whole answer read at once is 10+ KB). An
    event ends with a blank line: ``\\n\\n``, or with CRs, ``\\r\\n\\r\\n``."""
    kept: list[bytes] = []
    end = len(block)  # the block from here on is in ``kept`` (or dropped)
    at = block.rfind(USAGE_KEY)
    while at >= 0:
        start, stop = _bounds(block, at)
        if is_usage_event(block[start:stop]):
            kept.append(block[stop:end])
            end = start
        at = block.rfind(USAGE_KEY, 0, start)
    if end == len(block):
        return block
    kept.append(block[:end])
    return b"".join(reversed(kept))


def _bounds(block: bytes, at: int) -> tuple[int, int]:
    """Where the event holding byte ``at`` starts and where its blank line ends: the nearest
    ``\\n\\n`` each way, or a nearer ``\\n\\r\\n`` (a CR blank line), searched only up to it."""
    lf = block.rfind(b"\n\n", 0, at)
    cr = block.rfind(b"\n\r\n", max(lf, 0), at)
    start = cr + 3 if cr >= 0 else lf + 2 if lf >= 0 else 0
    lf = block.find(b"\n\n", at)
    lf_end = len(block) if lf < 0 else lf + 2
    cr = block.find(b"\n\r\n", at, lf_end)
    return start, cr + 3 if cr >= 0 else lf_end


class UsageStrip:
    """Passes a stream through whole events, less the usage event; an incomplete event waits for its
    end (the engine writes one event per chunk, so nothing usually waits)."""

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, chunk: bytes) -> bytes:
        if not self.pending and chunk.endswith(b"\n\n"):  # whole events (one, as the engine writes them)
            return without_usage_events(chunk)
        data = self.pending + chunk if self.pending else chunk
        lf, crlf = data.rfind(b"\n\n"), data.rfind(b"\r\n\r\n")
        end = max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)
        if not end:
            self.pending = data
            return b""
        out, self.pending = data[:end], data[end:]
        return without_usage_events(out)

    def rest(self) -> bytes:
        """What waited for an end that never came (a stream that broke, or ended without one)."""
        rest, self.pending = self.pending, b""
        return rest
