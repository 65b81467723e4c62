"""The seam on recorded frames: the continuation's frames re-shaped as the original stream's, the text
the client saw dropped and verified, usage counted once."""

from __future__ import annotations

import orjson
import pytest

from gateway.migration.record import Recorder
from gateway.migration.seam import Diverged, Seam, ending
from tests.gateway.migration.frames_recorded import CHAT, COMPLETION, UTF8


def cont(text: str, ids: list[int], finish: str | None = None) -> bytes:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None,
              "prompt_token_ids": None, "token_ids": ids}  # fmt: skip
    frame = {"id": "cmpl-other", "object": "text_completion", "created": 9, "model": "m", "choices": [choice]}
    return b"data: " + orjson.dumps(frame) + b"\n\n"


def content(events: list[bytes]) -> str:
    out = ""
    for e in events:
        if e.startswith(b"data: {"):
            for c in orjson.loads(e[6:])["choices"]:
                out += c.get("delta", {}).get("content") or c.get("text") or ""
    return out


def recorded(events: list[bytes]) -> tuple[Recorder, list[bytes]]:
    rec = Recorder()
    out = [rec.original(e) for e in events]
    rec.analyse()
    return rec, out


def continued(seam: Seam) -> list[bytes]:
    """What ``seam`` passes on of a continuation: " is", " blue" (length), its usage, ``[DONE]``."""
    usage = b'data: {"id":"cmpl-other","object":"text_completion","created":9,"model":"m","choices":[],'
    usage += b'"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2}}\n\n'
    out: list[bytes] = []
    for e in [cont(" is", [314]), cont(" blue", [3789], "length"), usage, b"data: [DONE]\n\n"]:
        out += seam.feed(e)
    return out


def test_chat_continues_in_the_original_shape() -> None:
    rec, seen = recorded(CHAT[:3])  # "The sky" then the replica dies
    seam = Seam(rec, chat=True)
    out = continued(seam)
    assert content(seen + out) == "The sky is blue"
    frames = [orjson.loads(e[6:]) for e in out[:3]]
    for f in frames:
        assert (f["id"], f["created"], f["model"], f["object"]) == (
            "chatcmpl-9d1c", 1764870000, "smollm2", "chat.completion.chunk")  # fmt: skip
    assert frames[0]["choices"][0] == {
        "index": 0, "delta": {"content": " is"}, "logprobs": None, "finish_reason": None, "token_ids": None
    }  # fmt: skip
    assert frames[1]["choices"][0]["finish_reason"] == "length"
    assert frames[2]["usage"] == {"prompt_tokens": 8, "total_tokens": 12, "completion_tokens": 4}
    assert out[-1] == b"data: [DONE]\n\n" and rec.ids == [504, 6153, 314, 3789]


def test_completion_continues_as_text_completion() -> None:
    rec, seen = recorded(COMPLETION)
    out = Seam(rec, chat=False).feed(cont(" It", [661], "stop"))
    frame = orjson.loads(out[0][6:])
    assert frame["id"] == "cmpl-77aa" and frame["choices"][0]["text"] == " It"
    assert content(seen + out) == " Paris. It"
    assert rec.usage() == (5, 3) and rec.finish_reason == "stop"


def test_held_back_text_is_regenerated_and_seen_text_dropped() -> None:
    rec, seen = recorded(UTF8)
    seam = Seam(rec, chat=True)
    assert rec.ids == [] and seam.skip == "Hello 日本"
    out = seam.feed(cont("Hello 日", [19556, 17097, 241, 115]))
    assert out == []  # all of it was seen
    out += seam.feed(cont("本", [40993]))
    out += seam.feed(cont("", [179]))
    out += seam.feed(cont("語", [120]))
    assert content(seen + out) == "Hello 日本語"
    assert rec.ids == [19556, 17097, 241, 115, 40993, 179, 120] and rec.clean == 7


def test_a_continuation_that_differs_from_what_was_seen_is_refused() -> None:
    rec, _ = recorded(UTF8)
    with pytest.raises(Diverged):
        Seam(rec, chat=True).feed(cont("Help", [1]))


def test_ids_kept_for_a_client_that_asked() -> None:
    rec = Recorder(keep_ids=True)
    for e in CHAT[:2]:
        rec.original(e)
    out = Seam(rec, chat=True).feed(cont(" sky", [6153]))
    assert orjson.loads(out[0][6:])["choices"][0]["token_ids"] == [6153]


def test_ending_a_stream_that_had_its_last_token() -> None:
    rec, _ = recorded(CHAT[:5])
    assert rec.finished
    out = ending(rec, wants_usage=True)
    assert orjson.loads(out[0][6:])["usage"] == {
        "prompt_tokens": 8,
        "total_tokens": 12,
        "completion_tokens": 4,
    }
    assert out[1] == b"data: [DONE]\n\n"
    assert ending(rec, wants_usage=True) == []


def test_the_continuations_usage_is_not_passed_on_when_the_gateway_asked_for_it() -> None:
    rec, _ = recorded(CHAT[:3])
    rec.drop_usage = True  # the client did not ask for usage: the gateway's own ask
    seam = Seam(rec, chat=True)
    out = continued(seam)
    assert len(out) == 3 and b'"usage"' not in b"".join(out) and out[-1] == b"data: [DONE]\n\n"
    assert rec.usage_sent and rec.usage() == (8, 4)
