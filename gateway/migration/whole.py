"""A non-streamed answer assembled from the stream the gateway asked for in its place (so that the
generation can move mid-way): the original's id, created and model, the text of every frame, the finish,
and usage counted once for the whole generation. The JSON holds OpenAI's fields of a chat completion or
a text completion (vLLM's extra null fields are left out)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.migration.record import Recorder, parse_frame, text_of


def assemble(events: list[bytes], recorder: Recorder, chat: bool) -> bytes:
    """The whole answer from the client-shaped ``events`` of one generation."""
    recorder.analyse()
    text: list[str] = []
    finish: object = recorder.finish_reason
    stop_reason: object = None
    for event in events:
        frame = parse_frame(event)
        choices = (frame or {}).get("choices") or []
        if not choices:
            continue
        text.append(text_of(frame or {}))
        if choices[0].get("finish_reason") is not None:
            finish, stop_reason = choices[0]["finish_reason"], choices[0].get("stop_reason")
    ident = recorder.identity
    choice: dict[str, Any] = {"index": 0}
    if chat:
        choice["message"] = {"role": "assistant", "content": "".join(text)}
    else:
        choice["text"] = "".join(text)
    choice.update(logprobs=None, finish_reason=finish or "stop", stop_reason=stop_reason)
    if recorder.keep_ids:
        choice["token_ids"] = recorder.ids
    prompt, completion = recorder.usage()
    usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}
    body = {
        "id": ident.id, "object": "chat.completion" if chat else "text_completion", "created": ident.created,
        "model": ident.model, "choices": [choice], "usage": usage,
    }  # fmt: skip
    return orjson.dumps(body)
