"""SSE events and the token-id fields of vLLM's stream frames, by byte surgery (no JSON parse on the
hot path).

vLLM (``return_token_ids``) puts ``"prompt_token_ids":[...]`` in a stream's first frame and
``"token_ids":[...]`` in each choice; without the flag it writes the same keys as ``null`` (the fields are
set explicitly, so ``exclude_unset`` keeps them). :func:`take_ids` returns the ids and the frame as the
client would have got it without the flag: each array replaced by ``null``.
"""

from __future__ import annotations

from dataclasses import dataclass

PROMPT_IDS = b'"prompt_token_ids":['
TOKEN_IDS = b'"token_ids":['
DONE = b"data: [DONE]"


class EventSplitter:
    """Cuts a byte stream into whole SSE events (each ends with a blank line); keeps the rest."""

    __slots__ = ("rest",)

    def __init__(self) -> None:
        self.rest = b""

    def feed(self, data: bytes) -> list[bytes]:
        if not self.rest and data.endswith(b"\n\n") and data.find(b"\n\n") == len(data) - 2:
            return [data]  # one whole event, as a replica writes them
        block = self.block(data)
        return [e + b"\n\n" for e in block.split(b"\n\n") if e] if block else []

    def block(self, data: bytes) -> bytes:
        """The whole events the stream has so far, not split (b"" if none); keeps the rest."""
        buf = self.rest + data if self.rest else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        end = buf.rfind(b"\n\n")
        if end < 0:
            self.rest = buf
            return b""
        self.rest = buf[end + 2 :]
        return buf[: end + 2]


def cut_array(frame: bytes, key: bytes) -> tuple[bytes, bytes | None]:
    """(the frame with the array after ``key`` as null, the array's inside or None when it has none)."""
    at = frame.find(key)  # (a key is found with its quotes: "token_ids" is not found in "prompt_token_ids")
    if at < 0:
        return frame, None
    open_at = at + len(key)
    close = frame.find(b"]", open_at)
    if close < 0:
        return frame, None
    return frame[: open_at - 1] + b"null" + frame[close + 1 :], frame[open_at:close]


def parse_ids(inner: bytes) -> list[int]:
    """The ids of an array's inside (``1,2,3``)."""
    return [int(x) for x in inner.split(b",")] if inner.strip() else []


def cut_ids(frame: bytes) -> tuple[bytes, bytes | None, bytes | None]:
    """(the frame with both arrays as null, the prompt's ids or None, the generated ids or None), the
    ids as the array's inside, unparsed (``1,2,3``)."""
    frame, prompt = cut_array(frame, PROMPT_IDS)
    frame, ids = cut_array(frame, TOKEN_IDS)
    return frame, prompt, ids


def take_ids(frame: bytes) -> tuple[bytes, list[int] | None, list[int] | None]:
    """(the frame with both arrays as null, prompt ids or None, generated ids or None)."""
    frame, prompt, ids = cut_ids(frame)
    return frame, None if prompt is None else parse_ids(prompt), None if ids is None else parse_ids(ids)


@dataclass(frozen=True, slots=True)
class FrameFacts:
    """What the recorder needs from one frame, read without parsing it."""

    text_empty: bool
    finished: bool
    usage: bool
    done: bool


def _value_at(frame: bytes, key: bytes) -> int:
    """Where the value of the first ``key`` (with its colon) starts, spaces skipped; -1 if absent."""
    at = frame.find(key)
    if at < 0:
        return -1
    at += len(key)
    while frame[at : at + 1] == b" ":
        at += 1
    return at


def facts(frame: bytes) -> FrameFacts:
    """Whether the choice's text is empty, a finish_reason is set, the frame carries usage, or ends."""
    if frame.startswith(DONE):
        return FrameFacts(True, False, False, True)
    at = _value_at(frame, b'"content":')
    if at < 0:
        at = _value_at(frame, b'"text":')
    text_empty = at < 0 or frame[at : at + 2] in (b'""', b"nu")
    finish = _value_at(frame, b'"finish_reason":')
    finished = finish >= 0 and frame[finish : finish + 4] != b"null"
    usage = _value_at(frame, b'"usage":')
    return FrameFacts(text_empty, finished, usage >= 0 and frame[usage : usage + 1] == b"{", False)
