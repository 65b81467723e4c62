"""FAKE ENGINE token ids: streams with ``return_token_ids`` in vLLM's frame shapes, and prompts of token
ids, deterministic so that a continuation equals an undisturbed run (for migration tests).

A text prompt (a chat's messages) counts 8 ids, from its hash. Generated token ``i`` has id
``GENERATED + i`` and the bytes :func:`token_bytes` gives: ``tok{i} ``, or with ``multibyte`` pieces that
end inside a UTF-8 character (whose text is held back until the character completes, as vLLM does). A
prompt that ends with generated ids continues the count after them: the continuation of a generation
writes exactly what the undisturbed generation would have written next.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import time
from typing import Any

GENERATED = 100_000
MAX_STREAM_TOKENS = 65_536
"""The most tokens one fake answer holds (above any test's ask: the slow-reader test's 50,000); a fuzzed
limit (the schemathesis test) is bounded by it instead of filling the memory."""


def prompt_ids(req: dict[str, Any], chat: bool) -> list[int]:
    """A prompt of token ids as it is; else 8 ids from its text (8 prompt tokens, as the fake's usage)."""
    prompt = req.get("messages") if chat else req.get("prompt", "")
    if isinstance(prompt, list) and prompt and all(isinstance(i, int) for i in prompt):
        return prompt
    return list(hashlib.sha256(json.dumps(prompt).encode()).digest()[:8])


def start_of(prompt: list[int]) -> int:
    """The index of the first token to generate: after the generated ids the prompt ends with."""
    return prompt[-1] - GENERATED + 1 if prompt and prompt[-1] >= GENERATED else 0


def token_bytes(i: int, multibyte: bool) -> bytes:
    if not multibyte:
        return f"tok{i} ".encode()
    return (b"\xe6\x97", b"\xa5", f" w{i}".encode())[i % 3]  # 日 in two pieces, then a word


class TokenFrames:
    """The frames of one streamed generation, built one at a time."""

    def __init__(
        self,
        req: dict[str, Any],
        chat: bool,
        model: str,
        rid: str,
        multibyte: bool,
        tokens: int = 16,
        max_model_len: int = 2048,
        pad: int = 0,
    ) -> None:
        """``pad``: a middle token's text padded to this many bytes (the fault suite's long fast stream)."""
        self.req, self.chat, self.model, self.multibyte, self.pad = req, chat, model, multibyte, pad
        self.prompt = prompt_ids(req, chat)
        self.start = start_of(self.prompt)
        # as vLLM: a chat's max_completion_tokens or max_tokens; a completion's max_tokens only
        limit = req.get("max_completion_tokens") if chat else None
        # bounded (a fuzzed limit of 2**20 tokens would stream for many seconds, written without waiting)
        self.n = min(int(limit or req.get("max_tokens") or tokens), max(max_model_len, MAX_STREAM_TOKENS))
        self.rid, self.created = rid, int(time.time())
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        # a middle token's frame from two byte templates (what json.dumps of its dict writes, at a tenth
        # of the CPU: the FAKE ENGINE must not be slower with token ids than without, or the gateway of
        # `make bench` would read a migrating stream in more, smaller pieces than a plain one)
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = {"id": rid, "object": obj, "created": self.created, "model": model}
        self.pre = json.dumps(head, separators=(",", ":")).encode()[:-1] + b',"choices":[{"index":0,'
        self.pre = b"data: " + self.pre + (b'"delta":{"content":' if chat else b'"text":')
        self.mid = (b"}," if chat else b",") + b'"logprobs":null,"finish_reason":null,'
        self.mid += b'"token_ids":[' if chat else b'"stop_reason":null,"prompt_token_ids":null,"token_ids":['
        # the whole middle frame as one template (text, id): one format a frame, as a plain stream's
        self.template = self.pre.replace(b"%", b"%%") + b"%b" + self.mid.replace(b"%", b"%%") + b"%d]}]}\n\n"

    def _frame(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        frame = {"id": self.rid, "object": obj, "created": self.created, "model": self.model}
        return (
            b"data: "
            + json.dumps({**frame, "choices": choices, **extra}, separators=(",", ":")).encode()
            + b"\n\n"
        )

    def head(self) -> list[bytes]:
        """A chat stream's role frame (with the prompt's ids); nothing for a completion."""
        if not self.chat:
            return []
        choice = {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        return [self._frame([choice], prompt_token_ids=self.prompt)]

    def token(self, j: int) -> bytes:
        """The frame of the ``j``-th token this request generates."""
        i = self.start + j
        last = j == self.n - 1
        if j > 0 and not last:
            # (ASCII tokens leave the decoder no state: it is needed only for the multibyte ones)
            text = self.decoder.decode(token_bytes(i, True)) if self.multibyte else f"tok{i} ".ljust(self.pad)
            return self.template % (json.dumps(text).encode(), GENERATED + i)
        text = self.decoder.decode(token_bytes(i, self.multibyte))
        choice: dict[str, Any] = {"index": 0}
        choice.update({"delta": {"content": text}} if self.chat else {"text": text})
        choice.update(logprobs=None, finish_reason="length" if last else None)
        if last or not self.chat:
            choice["stop_reason"] = None
        if not self.chat:
            choice["prompt_token_ids"] = self.prompt if j == 0 else None
        choice["token_ids"] = [GENERATED + i]
        if self.chat and j == 0:  # vLLM sends them in a role frame first; this fake has none
            return self._frame([choice], prompt_token_ids=self.prompt)
        return self._frame([choice])

    def tail(self) -> list[bytes]:
        options = self.req.get("stream_options") or {}
        out = []
        if options.get("include_usage"):
            p, c = len(self.prompt), self.n
            out.append(
                self._frame([], usage={"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c})
            )
        return [*out, b"data: [DONE]\n\n"]


def error_frame() -> bytes:
    """vLLM's in-stream error (a generation that failed after the stream started)."""
    err = {
        "error": {"message": "fake engine failure", "type": "InternalServerError", "param": None, "code": 500}
    }
    return b"data: " + json.dumps(err, separators=(",", ":")).encode() + b"\n\n"
