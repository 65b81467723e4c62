"""A non-streamed answer assembled from the stream the gateway asked for in its place (so that the
generation can move mid-way): exactly the JSON vLLM 0.32 writes for the same request answered whole
(``ChatCompletionResponse`` / ``CompletionResponse``, ``model_dump()`` through FastAPI's ``JSONResponse``:
every field, nulls included, in the models' order), with the stream's id, created and model, the text of
every frame, the finish, vLLM's ``system_fingerprint`` and usage counted once.

Fed the client-shaped events (:class:`~gateway.migration.stream.MigratingStream`'s output: token ids
already ``null`` unless the client asked for them, a continuation's frames already in the original's
shape). Cheap: a token frame (``"finish_reason":null``) is not parsed; the raw JSON string of its text
(and of its ids) is cut out by two byte searches and the pieces are decoded by ONE parse at the end. The
first frame (the identity, the prompt's ids) and the frames that end the stream (finish, usage) are parsed
whole. A stream that came whole in the usual shape is assembled without the recorder by :func:`at_once`
(one regex over its run of token frames), to the same bytes.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway.migration.frames import PROMPT_IDS, cut_array

CHAT_TEXT = (b'"delta":{"content":"', b'"},"logprobs":null,"finish_reason":null')
COMPLETION_TEXT = (b'"text":"', b'","logprobs":null,"finish_reason":null')
"""Where a token frame's text starts and ends (the end: no logprobs and no finish yet). A quote in the
text is escaped (``\\"``), so neither can match inside it."""
TOKEN_IDS = b'"token_ids":['


def _token_run(start_key: bytes, end_key: bytes) -> re.Pattern[bytes]:
    """A token frame's text (its raw JSON string, escapes kept) and its one id, in a run of frames. A
    frame's structural keys cannot occur inside its text (a quote there is escaped), so a frame of one
    choice matches once at most."""
    text = re.escape(start_key) + rb'([^"\\]*(?:\\.[^"\\]*)*)' + re.escape(end_key)
    return re.compile(text + rb'[^\n\[]*"token_ids":\[(\d+)\]')


CHAT_RUN, COMPLETION_RUN = _token_run(*CHAT_TEXT), _token_run(*COMPLETION_TEXT)
DONE_EVENT = b"data: [DONE]\n\n"


class Incomplete(ValueError):
    """The stream ended without a frame of the generation (nothing to assemble)."""


class Assembler:
    """Collects one generation's events (:meth:`feed`); :meth:`body` is the whole answer.
    ``keep_ids``: the client asked ``return_token_ids`` (the answer carries the prompt's and the
    generated ids, as vLLM's does)."""

    __slots__ = (
        "chat", "end_key", "fingerprint", "finish_reason", "first", "ids", "keep_ids", "prompt_ids",
        "prompt_text", "role", "start_key", "stop_reason", "text", "usage",
    )  # fmt: skip

    def __init__(self, chat: bool, keep_ids: bool) -> None:
        self.chat, self.keep_ids = chat, keep_ids
        self.start_key, self.end_key = CHAT_TEXT if chat else COMPLETION_TEXT
        self.first: dict[str, Any] | None = None
        self.text: list[bytes] = []
        """The raw JSON string contents of every frame's text, in order (decoded once, in :meth:`body`)."""
        self.ids: list[bytes] = []
        """The raw contents of every frame's ``token_ids`` array (only when the client asked for them)."""
        self.prompt_ids: object = None
        self.prompt_text: object = None
        self.role = "assistant"
        self.finish_reason: object = None
        self.stop_reason: object = None
        self.fingerprint: object = None
        self.usage: dict[str, Any] | None = None

    def feed(self, chunk: bytes) -> None:
        """Some whole SSE events of the client-shaped stream (one, or several read at once)."""
        start_key, end_key, text = self.start_key, self.end_key, self.text
        skip = len(start_key)
        for event in chunk.split(b"\n\n"):
            if self.first is not None and not self.keep_ids:  # a token frame: its text's raw JSON string
                end = event.find(end_key)
                if end > 0:
                    start = event.rfind(start_key, 0, end)
                    if start > 0:
                        if end > start + skip:
                            text.append(event[start + skip : end])
                        continue
            if event:
                self._event(event)

    def _event(self, event: bytes) -> None:
        if self.first is not None and self.end_key in event and self._token(event):
            return
        if not event.startswith(b"data: {"):
            return  # [DONE], a comment: nothing of the answer
        frame = orjson.loads(event[6:])
        if isinstance(frame, dict):
            self._frame(frame)

    def _token(self, event: bytes) -> bool:
        """A token frame's text (and ids) cut out raw; False when its shape is not the usual one."""
        end = event.find(self.end_key)
        start = event.rfind(self.start_key, 0, end)
        if start < 0:
            return False
        start += len(self.start_key)
        if self.keep_ids:
            at = event.find(TOKEN_IDS, end)
            close = event.find(b"]", at) if at >= 0 else -1
            if close < 0:
                return False
            if close > at + len(TOKEN_IDS):
                self.ids.append(event[at + len(TOKEN_IDS) : close])
        if end > start:
            self.text.append(event[start:end])
        return True

    def _frame(self, frame: dict[str, Any]) -> None:
        """A frame parsed whole: the first (identity, prompt ids), a finish, usage, or an unusual one."""
        if self.first is None:
            self.first = frame
            self.prompt_ids = frame.get("prompt_token_ids")
            self.prompt_text = frame.get("prompt_text")
        if frame.get("system_fingerprint") is not None:
            self.fingerprint = frame["system_fingerprint"]
        if isinstance(frame.get("usage"), dict):
            self.usage = frame["usage"]
        for choice in frame.get("choices") or ():
            self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        if self.chat:
            delta = choice.get("delta") or {}
            text, self.role = delta.get("content"), delta.get("role") or self.role
        else:
            text = choice.get("text")
            if choice.get("prompt_token_ids") is not None:
                self.prompt_ids = choice["prompt_token_ids"]
        if text:
            self.text.append(orjson.dumps(text)[1:-1])
        ids = choice.get("token_ids")
        if self.keep_ids and ids:
            self.ids.append(orjson.dumps(ids)[1:-1])
        if choice.get("finish_reason") is not None:
            self.finish_reason, self.stop_reason = choice["finish_reason"], choice.get("stop_reason")

    def body(self, usage: tuple[int, int]) -> bytes:
        """The whole answer; ``usage`` (prompt, completion) stands in when the stream carried none."""
        if self.first is None:
            raise Incomplete("the stream ended before its first frame")
        text: str = orjson.loads(b'"' + b"".join(self.text) + b'"')
        ids = orjson.loads(b"[" + b",".join(self.ids) + b"]") if self.keep_ids else None
        first = self.first
        answer: dict[str, Any] = {
            "id": first.get("id"), "object": "chat.completion" if self.chat else "text_completion",
            "created": first.get("created"), "model": first.get("model"),
            "choices": [self._whole_choice(text, ids)], "service_tier": None,
            "system_fingerprint": self.fingerprint, "usage": self._usage(usage),
        }  # fmt: skip
        if self.chat:
            answer.update(prompt_logprobs=None, prompt_token_ids=self._prompt_ids())
            answer["prompt_text"] = self.prompt_text
        answer.update(kv_transfer_params=None, ec_transfer_params=None, metrics=None)
        return orjson.dumps(answer)

    def _whole_choice(self, text: str, ids: list[int] | None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            choice["message"] = {
                "role": self.role, "content": text, "refusal": None, "annotations": None, "audio": None,
                "function_call": None, "reasoning": None,
            }  # fmt: skip
        else:
            choice["text"] = text
        choice.update(logprobs=None, finish_reason=self.finish_reason, stop_reason=self.stop_reason)
        choice["token_ids"] = ids
        if not self.chat:
            choice.update(prompt_logprobs=None, prompt_token_ids=self._prompt_ids())
        choice["routed_experts"] = None
        return choice

    def _prompt_ids(self) -> object:
        return self.prompt_ids if self.keep_ids else None

    def counts(self, fallback: tuple[int, int]) -> tuple[int, int]:
        """(prompt, completion) tokens: the stream's usage (counted once by the seam), else ``fallback``."""
        got = self.usage or {}
        return int(got.get("prompt_tokens", fallback[0])), int(got.get("completion_tokens", fallback[1]))

    def _usage(self, fallback: tuple[int, int]) -> dict[str, Any]:
        got = self.usage or {}
        prompt, completion = self.counts(fallback)
        return {
            "prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": got.get("prompt_tokens_details"),
            "completion_tokens_details": got.get("completion_tokens_details"),
        }  # fmt: skip


def at_once(chat: bool, keep_ids: bool, block: bytes) -> tuple[bytes, int, int] | None:
    """(the whole answer, prompt tokens, completion tokens) from the whole original stream read at once
    (the replica's bytes, token ids in, read to their end: gateway/pipeline/migrate.py), in one pass:
    what :meth:`Assembler.feed` makes of the same stream as the recorder passes it on, byte for byte (the
    arrays the recorder makes null are not read without ``keep_ids``), for the usual shape only: a first
    frame, a run of one-token frames (their texts and ids cut out by ONE regex over the run), the frames
    that end it (the finish, the usage: parsed whole) and ``[DONE]``. None for anything else, read the
    general way (where the recorder moves the generation on an error or malformed frame): a comment, an
    error, CR line ends, several ids in a frame, no usage (the counts would be the recorder's), a frame
    parsed here that is not JSON."""
    if not block.endswith(DONE_EVENT) or b"\r" in block:
        return None
    first_end = block.find(b"\n\n") + 2
    asm = Assembler(chat, keep_ids)
    run_end = end = len(block) - len(DONE_EVENT)  # (the run's end: before the frames that end it)
    while run_end > first_end:  # the frames that end it: no token frame's end key, parsed whole
        start = block.rfind(b"\n\n", first_end - 2, run_end - 2) + 2
        if block.find(asm.end_key, start, run_end) >= 0:
            break
        run_end = start
    ends = [block[:first_end], *block[run_end:end].split(b"\n\n")[:-1]]
    for event in ends:
        if not _plain(event):
            return None
    found = (CHAT_RUN if chat else COMPLETION_RUN).findall(block, first_end, run_end)
    # one frame a line, each with a match (and a line holds one at most); JSON has no raw newline
    if 2 * len(found) != block.count(b"\n", first_end, run_end):
        return None
    try:
        asm._frame(orjson.loads((ends[0] if keep_ids else cut_array(ends[0], PROMPT_IDS)[0])[6:]))
        if found:
            texts, ids = zip(*found, strict=True)
            asm.text.extend(texts)
            if keep_ids:
                asm.ids.extend(ids)
        for event in ends[1:]:
            asm._frame(orjson.loads(event[6:]))  # (each a JSON object: _plain; the first's ids unread)
        usage = asm.usage
        if usage is None or "prompt_tokens" not in usage or "completion_tokens" not in usage:
            return None
        return (asm.body((0, 0)), *asm.counts((0, 0)))  # (the counts are its usage's, never the fallback)
    except (ValueError, TypeError):  # (not JSON, odd usage: the general way raises it as it does today)
        return None


def _plain(event: bytes) -> bool:
    """A frame the recorder takes without reading the frames before it: a JSON object that is not an error,
    its ``token_ids`` one id or none (several make the recorder parse the frames it kept)."""
    if not event.startswith(b"data: {") or event.startswith(b'data: {"error"'):
        return False
    at = event.rfind(TOKEN_IDS)
    return at < 0 or event[at + len(TOKEN_IDS) : event.find(b"]", at)].isdigit()
