"""The whole answer assembled from a stream, on frames recorded from a real vLLM 0.32 replica: byte for byte
vLLM's own non-streamed answer to the same request (its id and created are the stream's), chat and
completions, finish and stop_reason, usage once, token ids only when asked; across a seam too."""

from __future__ import annotations

import orjson
import pytest

from gateway.migration.assemble import Assembler, Incomplete
from gateway.migration.frames import take_ids
from gateway.migration.record import Recorder
from gateway.migration.seam import Seam
from tests.gateway.migration import whole_recorded as rec

CASES = {
    "chat": (True, rec.CHAT_STREAM, rec.CHAT_WHOLE, rec.CHAT_WHOLE_IDS),
    "completion": (False, rec.COMPLETION_STREAM, rec.COMPLETION_WHOLE, rec.COMPLETION_WHOLE_IDS),
    "chat, EOS": (True, rec.CHAT_EOS_STREAM, rec.CHAT_EOS_WHOLE, rec.CHAT_EOS_WHOLE_IDS),
    "completion, stop id": (
        False, rec.COMPLETION_STOP_ID_STREAM, rec.COMPLETION_STOP_ID_WHOLE, rec.COMPLETION_STOP_ID_WHOLE_IDS,
    ),
}  # fmt: skip


def client_shaped(events: list[bytes]) -> list[bytes]:
    """The events as the client gets them when it did not ask for ids (the arrays made null)."""
    return [take_ids(e)[0] for e in events]


def assemble(chat: bool, events: list[bytes], keep_ids: bool, usage: tuple[int, int] = (0, 0)) -> bytes:
    assembler = Assembler(chat, keep_ids)
    for event in events:
        assembler.feed(event)
    return assembler.body(usage)


def as_stream(whole: bytes, stream: list[bytes]) -> bytes:
    """vLLM's whole answer with the stream's id and created (each request gets its own)."""
    answer, first = orjson.loads(whole), orjson.loads(stream[0][6:])
    old = f'"id":"{answer["id"]}","object":"{answer["object"]}","created":{answer["created"]},'.encode()
    new = f'"id":"{first["id"]}","object":"{answer["object"]}","created":{first["created"]},'.encode()
    assert whole.count(old) == 1
    return whole.replace(old, new)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_answer_is_vllms_own(case: str) -> None:
    chat, stream, whole, _ = CASES[case]
    assert assemble(chat, client_shaped(stream), keep_ids=False) == as_stream(whole, stream)


@pytest.mark.parametrize("case", sorted(CASES))
def test_token_ids_when_the_client_asked(case: str) -> None:
    chat, stream, _, whole_ids = CASES[case]
    assert assemble(chat, stream, keep_ids=True) == as_stream(whole_ids, stream)


def test_finish_and_stop_reason_come_from_the_last_token() -> None:
    answer = orjson.loads(assemble(False, client_shaped(rec.COMPLETION_STOP_ID_STREAM), False))
    choice = answer["choices"][0]
    assert (choice["text"], choice["finish_reason"], choice["stop_reason"]) == (" Paris", "stop", 30)
    assert answer["usage"]["completion_tokens"] == 2


def test_a_stream_without_usage_takes_the_given_counts() -> None:
    # the plain stream (no include_usage): system_fingerprint on the finish frame, usage from the caller
    body = assemble(True, rec.CHAT_PLAIN_STREAM, keep_ids=False, usage=(34, 12))
    assert body == as_stream(rec.CHAT_WHOLE, rec.CHAT_PLAIN_STREAM)


def test_several_events_in_one_chunk() -> None:
    events = client_shaped(rec.COMPLETION_STREAM)
    chunks = [events[0], b"".join(events[1:5]), *events[5:]]
    assert assemble(False, chunks, False) == as_stream(rec.COMPLETION_WHOLE, rec.COMPLETION_STREAM)


def test_escaped_and_non_ascii_text_decodes_once() -> None:
    text = 'a "quote", a \\ backslash},"logprobs": \n\t and ü 日本 \u2028 \x01'
    frame = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    role = {**frame, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                  "logprobs": None, "finish_reason": None}]}  # fmt: skip
    events = [b"data: " + orjson.dumps(role) + b"\n\n"]
    for piece in [text[:9], text[9:30], text[30:]]:
        choice = {"index": 0, "delta": {"content": piece}, "logprobs": None, "finish_reason": None}
        events.append(b"data: " + orjson.dumps({**frame, "choices": [choice]}) + b"\n\n")
    answer = orjson.loads(assemble(True, events, False, (3, 3)))
    assert answer["choices"][0]["message"]["content"] == text


def test_an_unusual_frame_is_parsed_whole() -> None:
    # a delta that does not start with content (a reasoning parser's, say): read whole, its content kept
    events = client_shaped(rec.CHAT_STREAM)
    events[2] = events[2].replace(b'"delta":{"content":".', b'"delta":{"reasoning":null,"content":".')
    assert assemble(True, events, False) == as_stream(rec.CHAT_WHOLE, rec.CHAT_STREAM)


def test_nothing_to_assemble() -> None:
    with pytest.raises(Incomplete):
        assemble(True, [b"data: [DONE]\n\n"], False)


def continuation(events: list[bytes]) -> list[bytes]:
    """The rest of a recorded chat stream as a /v1/completions continuation writes it (another id)."""
    out = []
    for event in events:
        frame = orjson.loads(event[6:])
        frame.update(id="cmpl-cont", object="text_completion", created=7)
        if frame["choices"]:
            old = frame["choices"][0]
            frame["choices"] = [{"index": 0, "text": old["delta"]["content"], "logprobs": None,
                                 "finish_reason": old["finish_reason"], "stop_reason": old.get("stop_reason"),
                                 "prompt_token_ids": None, "token_ids": old["token_ids"]}]  # fmt: skip
        else:  # the continuation's own usage: its prompt is the original's + the 5 generated ids
            frame["usage"] = {"prompt_tokens": 39, "total_tokens": 46, "completion_tokens": 7}
        out.append(b"data: " + orjson.dumps(frame) + b"\n\n")
    return out


@pytest.mark.parametrize("keep_ids", [False, True])
def test_across_a_seam_it_is_still_vllms_answer(keep_ids: bool) -> None:
    """5 tokens from the first replica, the rest from a continuation (the seam re-shapes its frames): the
    answer is the undisturbed one, usage counted once (34 + 12, not the continuation's 39 + 7)."""
    recorder = Recorder(keep_ids=keep_ids)
    seen = [recorder.original(e) for e in rec.CHAT_STREAM[:6]]  # the role frame and 5 tokens
    seam = Seam(recorder, chat=True)
    after = [out for e in [*continuation(rec.CHAT_STREAM[6:-1]), b"data: [DONE]\n\n"] for out in seam.feed(e)]
    whole = rec.CHAT_WHOLE_IDS if keep_ids else rec.CHAT_WHOLE
    assert assemble(True, seen + after, keep_ids) == as_stream(whole, rec.CHAT_STREAM)
