"""The whole answer assembled in one pass from a stream that came whole (gateway/migration/assemble.py
``at_once``) is byte for byte what the general way makes of it (the recorder of gateway/migration/record.py
as MigratingStream feeds it, then :class:`Assembler` event by event), over many vLLM-shaped streams: odd
texts and UTF-8 held back, several tokens in a frame, ``return_token_ids`` on and off, chat and
completions, finish with ``stop_reason``, usage; and it steps aside (None) wherever the general way would
move the generation or read it otherwise (an error or malformed frame, a comment, no [DONE], ...)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.migration.assemble import Assembler, at_once
from gateway.migration.frames import EventSplitter
from gateway.migration.record import MalformedFrame, Recorder
from testing.fake_tokens import TokenFrames
from tests.gateway.migration import whole_recorded as rec

Result = tuple[bytes, int, int] | str


def general(chat: bool, keep_ids: bool, block: bytes) -> Result:
    """What the general way answers for ``block`` read at once: MigratingStream's ``_take`` (the recorder),
    its end (``[DONE]`` or a move), then gateway/pipeline/migrate.py's assembly. "moves": the generation
    would move (continued elsewhere); "raises": the assembly fails."""
    recorder = Recorder(keep_ids=keep_ids)
    try:
        head, rest = recorder.bulk(EventSplitter().block(block))
        parts = [head, *(recorder.original(e + b"\n\n") for e in rest.split(b"\n\n") if e)]
    except MalformedFrame:
        return "moves"
    if not recorder.done:
        return "moves"
    assembler = Assembler(chat, keep_ids)
    try:
        assembler.feed(b"".join(parts))
        return (assembler.body(recorder.usage()), *assembler.counts(recorder.usage()))
    except (ValueError, TypeError):
        return "raises"


def agrees(chat: bool, keep_ids: bool, block: bytes) -> bytes | None:
    """at_once's answer, checked against the general way's (None: it stepped aside)."""
    fast, slow = at_once(chat, keep_ids, block), general(chat, keep_ids, block)
    assert fast is None or fast == slow, (fast, slow)
    return None if fast is None else fast[0]


Dump = Callable[[Any], bytes]
DUMPS: list[Dump] = [
    orjson.dumps,  # vLLM's own (pydantic): UTF-8 as it is
    lambda v: json.dumps(v, separators=(",", ":")).encode(),  # \\u escapes
]


@st.composite
def streams(draw: st.DrawFn) -> tuple[bool, list[bytes]]:
    """A vLLM-shaped stream with token ids: a first frame (a chat's role frame with the prompt's ids, or
    the first token's), frames of one token (or of several, or none), the finish, the usage, [DONE]."""
    chat = draw(st.booleans())
    dump = draw(st.sampled_from(DUMPS))
    head = {"id": "chatcmpl-x" if chat else "cmpl-x", "created": draw(st.integers(0, 2**31))}
    head |= {"object": "chat.completion.chunk" if chat else "text_completion", "model": "m"}
    prompt = draw(st.lists(st.integers(0, 60_000), min_size=1, max_size=6))
    pieces = draw(st.lists(st.text(max_size=6), min_size=1, max_size=24))
    several = draw(st.booleans())  # now and then a frame of several tokens (as vLLM's under load)
    finish, stop = draw(st.sampled_from([("length", None), ("stop", None), ("stop", 30), ("stop", "</s>")]))
    next_id = iter(range(1000, 2000))

    def frame(choices: list[dict[str, Any]], **top: Any) -> bytes:
        return b"data: " + dump({**head, "choices": choices, **top}) + b"\n\n"

    def choice(text: str, ids: list[int], last: bool, first: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"index": 0}
        out |= {"delta": {"content": text}} if chat else {"text": text}
        out |= {"logprobs": None, "finish_reason": finish if last else None}
        if last or not chat:
            out["stop_reason"] = stop if last else None
        if not chat:
            out["prompt_token_ids"] = prompt if first else None
        out["token_ids"] = ids
        return out

    events, role = [], chat and draw(st.booleans())
    if role:
        hello = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
        events.append(frame([{**hello, "finish_reason": None}], prompt_token_ids=prompt, prompt_text=None))
    for i, text in enumerate(pieces):
        count = draw(st.integers(1, 3)) if several else 1
        ids = [next(next_id) for _ in range(count)]
        top = {"prompt_token_ids": prompt} if chat and not role and i == 0 else {}
        events.append(frame([choice(text, ids, i == len(pieces) - 1, i == 0)], **top))
    if draw(st.booleans()):
        usage = {"prompt_tokens": len(prompt), "total_tokens": len(prompt) + 9, "completion_tokens": 9}
        extra = {"system_fingerprint": "vllm-0.32.0"} if draw(st.booleans()) else {}
        events.append(frame([], usage=usage, **extra))
    return chat, [*events, b"data: [DONE]\n\n"]


ODD = [
    b'data: {"error":{"message":"boom","type":"InternalServerError","param":null,"code":500}}\n\n',
    b"data: not json at all\n\n",
    b": a comment\n\n",
    b"\n\n",
    b'data: {"id":"broken\n\n',
    b'data: {x "delta":{"content":"a"},"logprobs":null,"finish_reason":null,"token_ids":[5]}]}\n\n',
    b'data: {x "text":"a","logprobs":null,"finish_reason":null,"token_ids":[5]}]}\n\n',
]


@settings(max_examples=400, deadline=None)
@given(streams(), st.booleans())
def test_a_whole_stream_gets_the_general_ways_answer(
    stream: tuple[bool, list[bytes]], keep_ids: bool
) -> None:
    chat, events = stream
    block = b"".join(events)
    body = agrees(chat, keep_ids, block)
    usual = b'"usage":{' in block and b"],[" not in block and all(b"," not in ids for ids in _ids(block))
    if usual:  # the usual shape: taken in one pass (the hot path's)
        assert body is not None


def _ids(block: bytes) -> list[bytes]:
    return [part.split(b"]", 1)[0] for part in block.split(b'"token_ids":[')[1:]]


@settings(max_examples=400, deadline=None)
@given(streams(), st.booleans(), st.data())
def test_a_stream_out_of_the_usual_is_the_general_ways(
    stream: tuple[bool, list[bytes]], keep_ids: bool, data: st.DataObject
) -> None:
    """An odd frame anywhere, CR line ends, no [DONE], a cut: at_once steps aside wherever the general way
    would move the generation, and never answers otherwise than it."""
    chat, events = stream
    how = data.draw(st.sampled_from(["insert", "crlf", "crlf-one", "no-done", "cut", "several-last"]))
    if how == "insert":
        events.insert(data.draw(st.integers(0, len(events))), data.draw(st.sampled_from(ODD)))
    block = b"".join(events)
    if how == "crlf":
        block = block.replace(b"\n", b"\r\n")
    elif how == "crlf-one":
        at = block.find(b"\n\n", data.draw(st.integers(0, len(block))))
        block = block[:at] + b"\r\n\r\n" + block[at + 2 :] if at >= 0 else block
    elif how == "no-done":
        block = block.removesuffix(b"data: [DONE]\n\n")
    elif how == "cut":
        block = block[: data.draw(st.integers(0, len(block)))]
    elif how == "several-last":
        block = block.replace(b'"token_ids":[', b'"token_ids":[7,', 1)
    agrees(chat, keep_ids, block)
    if isinstance(general(chat, keep_ids, block), str):
        assert at_once(chat, keep_ids, block) is None


@pytest.mark.parametrize("keep_ids", [False, True])
@pytest.mark.parametrize("multibyte", [False, True])
@pytest.mark.parametrize("chat", [True, False])
def test_the_fake_engines_streams_in_one_pass(chat: bool, multibyte: bool, keep_ids: bool) -> None:
    for n in (1, 2, 3, 16, 100):
        req: dict[str, Any] = {
            "max_tokens": n,
            "stream_options": {"include_usage": True},
            "prompt": "hi",
            "messages": [],
        }
        frames = TokenFrames(req, chat, "fake-model", "rid", multibyte)
        block = b"".join([frames.token(j) for j in range(frames.n)] + frames.tail())
        assert agrees(chat, keep_ids, block) is not None


@pytest.mark.parametrize(
    ("chat", "stream"),
    [(True, rec.CHAT_STREAM), (False, rec.COMPLETION_STREAM), (True, rec.CHAT_EOS_STREAM),
     (False, rec.COMPLETION_STOP_ID_STREAM)],
)  # fmt: skip
@pytest.mark.parametrize("keep_ids", [False, True])
def test_vllms_recorded_streams_in_one_pass(chat: bool, stream: list[bytes], keep_ids: bool) -> None:
    assert agrees(chat, keep_ids, b"".join(stream)) is not None


def test_without_usage_it_steps_aside() -> None:
    # (the counts would be the recorder's: the general way has them)
    assert at_once(True, False, b"".join(rec.CHAT_PLAIN_STREAM)) is None
