"""The continuation's frames (``/v1/completions``, parsed) re-shaped as the original stream's: the same
id, created, model and object, a chat delta or a completion text, token ids only when the client asked,
the text the client already saw dropped (and verified), and usage counted once for the whole generation.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.migration.record import MalformedFrame, Recorder, parse_frame, text_of

DONE_EVENT = b"data: [DONE]\n\n"


class Diverged(ValueError):
    """The continuation regenerated text that differs from what the client saw: it cannot be stitched."""


class Seam:
    """Turns one continuation's events into the events the client gets; tokens go to ``recorder``."""

    def __init__(self, recorder: Recorder, chat: bool) -> None:
        self.recorder, self.chat = recorder, chat
        recorder.analyse()
        self.skip = recorder.seen_tail
        recorder.ids = recorder.ids[: recorder.clean]  # the continuation regenerates the tail
        recorder.tail_text = []

    def feed(self, event: bytes) -> list[bytes]:
        if event.startswith(b"data: [DONE]"):
            self.recorder.done = True
            return [DONE_EVENT]
        if not event.startswith(b"data: "):
            return []
        frame = parse_frame(event)
        if frame is None or "error" in frame:
            raise MalformedFrame(f"continuation frame: {event[:80]!r}")
        choices = frame.get("choices") or []
        if not choices:
            usage = [self._usage(frame)] if frame.get("usage") else []
            return [] if self.recorder.drop_usage else usage
        return self._choice(choices[0], frame.get("system_fingerprint"))

    def _choice(self, choice: dict[str, Any], fingerprint: object = None) -> list[bytes]:
        rec = self.recorder
        ids = [int(i) for i in choice.get("token_ids") or ()]
        text, finish = text_of({"choices": [choice]}), choice.get("finish_reason")
        rec.add(ids, text or None)
        if self.skip:
            seen = min(len(self.skip), len(text))
            if text[:seen] != self.skip[:seen]:
                wrote, saw = text[:seen], self.skip[:seen]
                raise Diverged(f"the continuation wrote {wrote!r} where the client saw {saw!r}")
            self.skip, text = self.skip[seen:], text[seen:]
            if not text and finish is None:
                return []
        if finish is not None:
            rec.finish_reason = str(finish)
        out = self._content(text, ids, finish, choice.get("stop_reason"))
        if fingerprint is not None:  # vLLM's, on the last frame: kept, as the original would have sent it
            out["system_fingerprint"] = fingerprint
        return [self._event(out)]

    def _content(self, text: str, ids: list[int], finish: object, stop_reason: object) -> dict[str, Any]:
        ident = self.recorder.identity
        template = ident.template or self._default()
        old = (template.get("choices") or [{}])[0]
        choice: dict[str, Any] = {"index": old.get("index", 0)}
        choice["delta" if self.chat else "text"] = {"content": text} if self.chat else text
        choice["logprobs"] = None
        choice["finish_reason"] = finish
        if finish is not None or "stop_reason" in old:
            choice["stop_reason"] = stop_reason
        if "prompt_token_ids" in old:
            choice["prompt_token_ids"] = None
        if "token_ids" in old or self.recorder.keep_ids:
            choice["token_ids"] = ids if self.recorder.keep_ids else None
        frame = {k: v for k, v in template.items() if k != "choices"}
        frame["choices"] = [choice]
        return frame

    def _default(self) -> dict[str, Any]:
        ident = self.recorder.identity
        return {"id": ident.id, "object": ident.object, "created": ident.created, "model": ident.model}

    def _usage(self, frame: dict[str, Any]) -> bytes:
        prompt, completion = self.recorder.usage()
        usage = dict(frame.get("usage") or {})
        usage.pop("prompt_tokens_details", None)  # the continuation's cache hits say nothing of the request
        usage.update(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
        out = {k: v for k, v in self._default().items()}
        out.update(choices=[], usage=usage)
        if frame.get("system_fingerprint") is not None:
            out["system_fingerprint"] = frame["system_fingerprint"]
        self.recorder.usage_sent = True
        return self._event(out)

    @staticmethod
    def _event(frame: dict[str, Any]) -> bytes:
        return b"data: " + orjson.dumps(frame) + b"\n\n"


def ending(recorder: Recorder, wants_usage: bool) -> list[bytes]:
    """The events that end a stream whose last token frame arrived but whose end did not: the usage
    (when the client asked and has not had it) and ``[DONE]``."""
    out: list[bytes] = []
    if wants_usage and not recorder.usage_sent:
        prompt, completion = recorder.usage()
        ident = recorder.identity
        usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion}
        usage["completion_tokens"] = completion
        frame = {"id": ident.id, "object": ident.object, "created": ident.created, "model": ident.model}
        if not recorder.drop_usage:
            out.append(b"data: " + orjson.dumps({**frame, "choices": [], "usage": usage}) + b"\n\n")
        recorder.usage_sent = True
    if not recorder.done:
        out.append(DONE_EVENT)
        recorder.done = True
    return out
