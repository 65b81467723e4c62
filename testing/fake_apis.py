"""FAKE ENGINE, the rest of vLLM's data plane: the Responses API (with an in-memory store, as vLLM's
``VLLM_ENABLE_RESPONSES_API_STORE=1``), Anthropic's Messages API, rerank, score, pooling, classify,
tokenize, audio transcription, and runtime LoRA load/unload. Fixed answers in each API's shape; not a
model. Used by testing/fake_engine.py."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


def error(message: str, kind: str = "NotFoundError", code: int = 404) -> dict[str, Any]:
    """vLLM's error body: OpenAI's shape."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def not_found(message: str) -> tuple[int, bytes]:
    return 404, json.dumps(error(message)).encode()


def bad_request(message: str) -> tuple[int, bytes]:
    return 400, json.dumps(error(message, "BadRequestError", 400)).encode()


@dataclass
class FakeApis:
    """One fake replica's state: its stored responses and its runtime LoRA adapters."""

    model: str
    tag: str
    lora: bool = True
    responses: dict[str, dict[str, Any]] = field(default_factory=dict)
    adapters: dict[str, str] = field(default_factory=dict)
    ids: Iterator[int] = field(default_factory=itertools.count)

    # Responses API
    def response(self, req: dict[str, Any], n: int) -> tuple[int, dict[str, Any]]:
        previous = req.get("previous_response_id")
        if previous is not None and previous not in self.responses:
            return 404, error(f"Response with id '{previous}' not found.")
        rid = f"resp_{self.tag}{next(self.ids)}"
        text = f"answer from {self.tag}" + (f" after {previous}" if previous else "") + " tok" * n
        obj = {
            "id": rid,
            "object": "response",
            "created_at": int(time.time()),
            "model": req.get("model", self.model),
            "status": "completed",
            "previous_response_id": previous,
            "output": [
                {
                    "type": "message",
                    "id": f"msg_{rid}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 8,
                "output_tokens": n,
                "total_tokens": 8 + n,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }
        if req.get("store", True):
            self.responses[rid] = obj
        return 200, obj

    def response_events(self, obj: dict[str, Any]) -> list[bytes]:
        """The stream of a response: created, one delta per word, completed."""
        started = {**obj, "status": "in_progress", "output": []}
        text = obj["output"][0]["content"][0]["text"]
        events: list[tuple[str, dict[str, Any]]] = [("response.created", {"response": started})]
        for word in text.split(" "):
            delta = {
                "item_id": f"msg_{obj['id']}",
                "output_index": 0,
                "content_index": 0,
                "delta": word + " ",
            }
            events.append(("response.output_text.delta", delta))
        events.append(("response.completed", {"response": obj}))
        return [
            sse(kind, {"type": kind, "sequence_number": i, **data}) for i, (kind, data) in enumerate(events)
        ]

    def stored(self, rid: str, cancel: bool) -> tuple[int, dict[str, Any]]:
        obj = self.responses.get(rid)
        if obj is None:
            return 404, error(f"Response with id '{rid}' not found.")
        return 200, {**obj, "status": "cancelled"} if cancel else obj

    # Anthropic Messages API
    def message(self, req: dict[str, Any], n: int) -> dict[str, Any]:
        return {
            "id": f"msg_{self.tag}{next(self.ids)}",
            "type": "message",
            "role": "assistant",
            "model": req.get("model", self.model),
            "content": [{"type": "text", "text": "tok " * n}],
            "stop_reason": "max_tokens",
            "stop_sequence": None,
            "usage": {"input_tokens": 8, "output_tokens": n},
        }

    def message_events(self, req: dict[str, Any], n: int) -> list[bytes]:
        start = {**self.message(req, 0), "content": []}
        events = [
            sse("message_start", {"type": "message_start", "message": start}),
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            ),
        ]
        for i in range(n):
            delta = {"type": "text_delta", "text": f"tok{i} "}
            events.append(
                sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
            )
        events.append(sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
        end = {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
            "usage": {"output_tokens": n},
        }
        events.append(sse("message_delta", end))
        events.append(sse("message_stop", {"type": "message_stop"}))
        return events

    # vLLM's own endpoints
    def other(self, path: str, req: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        model = req.get("model", self.model)
        usage = {"prompt_tokens": 4, "total_tokens": 4}
        if path == "/v1/messages/count_tokens":
            return 200, {"input_tokens": 8}
        if path in ("/v1/rerank", "/v2/rerank", "/rerank"):
            docs = req.get("documents") or []
            results = [
                {"index": i, "relevance_score": 1 / (i + 1), "document": {"text": d}}
                for i, d in enumerate(docs)
            ]
            return 200, {"id": "rerank-fake", "model": model, "results": results, "usage": usage}
        if path in ("/v1/score", "/score"):
            data = [{"index": 0, "object": "score", "score": 0.5}]
            return 200, {"id": "score-fake", "object": "list", "model": model, "data": data, "usage": usage}
        if path == "/pooling":
            data = [{"index": 0, "object": "pooling", "data": [0.1] * 8}]
            return 200, {"id": "pool-fake", "object": "list", "model": model, "data": data, "usage": usage}
        if path == "/classify":
            data = [{"index": 0, "label": "positive", "probs": [0.9, 0.1], "num_classes": 2}]
            return 200, {
                "id": "classify-fake",
                "object": "list",
                "model": model,
                "data": data,
                "usage": usage,
            }
        if path == "/tokenize":
            text = str(req.get("prompt", ""))
            tokens = list(range(1, len(text.split()) + 1))
            return 200, {"count": len(tokens), "max_model_len": 2048, "tokens": tokens}
        if path == "/detokenize":
            return 200, {"prompt": " ".join(f"t{t}" for t in req.get("tokens", []))}
        return 404, error(f"no path {path}")

    # runtime LoRA (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING endpoints)
    def load_lora(self, req: dict[str, Any]) -> tuple[int, bytes]:
        if not self.lora:
            return bad_request("this fake replica refuses LoRA adapters (--no-lora)")
        name, path = req.get("lora_name"), req.get("lora_path")
        if not name or not path:
            return bad_request("lora_name and lora_path are required")
        self.adapters[name] = path
        return 200, f"Success: LoRA adapter '{name}' added successfully.".encode()

    def unload_lora(self, req: dict[str, Any]) -> tuple[int, bytes]:
        if self.adapters.pop(str(req.get("lora_name")), None) is None:
            return not_found(f"The lora adapter '{req.get('lora_name')}' cannot be found.")
        return 200, b"Success: LoRA adapter unloaded."

    def models(self) -> list[str]:
        return [self.model, *self.adapters]


def sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: ".encode() + json.dumps(data).encode() + b"\n\n"
