"""A background response's object and events, as the gateway makes them (pure logic, no I/O).

The gateway runs a background response as a stream from the replica and keeps its events
(background.py). :class:`Renumbered` cuts the replica's SSE bytes into events and gives each the shape
every client of the response sees, whichever gateway serves it: ``event: <type>`` then one ``data:``
line, ``sequence_number`` counted by the gateway from 0 (whatever the replica sent), and the response
object in it under the gateway's id with ``background: true`` (the replica's own id replaced everywhere,
item ids included). SSE comments (a held stream's) and ``[DONE]`` are dropped; the gateway's own error
event (a stream that broke) becomes an ``error`` event and the response ``failed``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import orjson

TERMINAL = frozenset({"completed", "failed", "cancelled", "incomplete"})
ECHOED = (
    "instructions",
    "max_output_tokens",
    "metadata",
    "model",
    "parallel_tool_calls",
    "previous_response_id",
    "reasoning",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "truncation",
    "user",
)
PREFIX = "resp_bg"
"""The gateway's ids: vLLM's are ``resp_`` and hex digits, so an id with a ``g`` is never one of them."""

Event = tuple[int, bytes]
"""(sequence number, the event's bytes as every client gets them)."""


def new_id() -> str:
    return PREFIX + os.urandom(20).hex()


def is_background(response_id: str) -> bool:
    return response_id.startswith(PREFIX)


def initial(response_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The object a background request is answered with at once: queued, nothing generated yet, the
    request's own settings echoed as OpenAI does."""
    obj: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "queued",
        "background": True,
        "error": None,
        "incomplete_details": None,
        "output": [],
        "usage": None,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "metadata": {},
    }
    obj.update({k: payload[k] for k in ECHOED if k in payload})
    return obj


def upstream_body(payload: dict[str, Any]) -> bytes:
    """What the replica is sent: the request as a stream the gateway keeps (not stored by the replica,
    not background: the replica needs neither)."""
    run = {k: v for k, v in payload.items() if k != "background"}
    return orjson.dumps({**run, "stream": True, "store": False})


def with_status(obj: dict[str, Any], status: str, error: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**obj, "status": status, "error": error if error is not None else obj.get("error")}


def error_of(body: bytes) -> dict[str, Any]:
    """``{"code", "message"}`` of an error answer in OpenAI's shape (or a bare one)."""
    try:
        doc = orjson.loads(body)
        err = doc.get("error", doc) if isinstance(doc, dict) else {}
    except orjson.JSONDecodeError:
        err = {}
    if not isinstance(err, dict):
        err = {"message": str(err)}
    code = err.get("code") or err.get("type") or "server_error"
    return {"code": str(code), "message": str(err.get("message") or "the generation failed")}


class Renumbered:
    """The replica's stream turned into the response's events (see the module docstring); ``status``
    and ``obj`` follow the response object the events carry."""

    def __init__(self, response_id: str, obj: dict[str, Any]) -> None:
        self.rid, self.obj, self.status = response_id, obj, str(obj.get("status", "queued"))
        self.seq, self.rest, self.upstream_id = -1, b"", b""

    def feed(self, chunk: bytes) -> list[Event]:
        data, out, start = self.rest + chunk, list[Event](), 0
        while (end := data.find(b"\n\n", start)) >= 0:
            event = self.event(data[start:end])
            if event is not None:
                out.append(event)
            start = end + 2
        self.rest = data[start:]
        return out

    def event(self, raw: bytes) -> Event | None:
        lines = [line[5:].lstrip() for line in raw.split(b"\n") if line.startswith(b"data:")]
        data = b"\n".join(lines)
        if not data or data == b"[DONE]":
            return None
        if self.upstream_id:
            data = data.replace(self.upstream_id, self.rid.encode())
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(doc, dict):
            return None
        if "type" not in doc and isinstance(doc.get("error"), dict):  # the gateway's own error event
            return self.failed(error_of(data))
        response = doc.get("response")
        if isinstance(response, dict):
            if not self.upstream_id and isinstance(response.get("id"), str):
                self.upstream_id = response["id"].encode()
            response.update(id=self.rid, background=True)
            self.obj, self.status = response, str(response.get("status", self.status))
        return self.framed(doc)

    def failed(self, error: dict[str, Any]) -> Event:
        """An ``error`` event, and the response failed with it."""
        self.obj, self.status = with_status(self.obj, "failed", error), "failed"
        return self.framed({"type": "error", **error, "param": None})

    def ended(self) -> list[Event]:
        """The stream is over: a response that got no last event (its stream was cut) failed."""
        if self.status in TERMINAL:
            return []
        return [
            self.failed({"code": "server_error", "message": "the generation ended before its last event"})
        ]

    def framed(self, doc: dict[str, Any]) -> Event:
        self.seq += 1
        doc["sequence_number"] = self.seq
        kind = str(doc.get("type", "message")).encode()
        return self.seq, b"event: " + kind + b"\ndata: " + orjson.dumps(doc) + b"\n\n"
