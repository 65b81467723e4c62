"""SSE framing and the token-id fields of vLLM frames, by byte surgery."""

from __future__ import annotations

from gateway.migration.frames import EventSplitter, facts, take_ids
from tests.gateway.migration.frames_recorded import CHAT, CHAT_PLAIN_FIRST, COMPLETION


def test_splitter_cuts_whole_events_across_reads() -> None:
    data = b"".join(CHAT)
    splitter, events = EventSplitter(), []
    for i in range(0, len(data), 7):
        events += splitter.feed(data[i : i + 7])
    assert events == CHAT and splitter.rest == b""


def test_splitter_keeps_half_an_event_and_reads_crlf() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b"data: {}\r\n\r\ndata: {") == [b"data: {}\n\n"]
    assert splitter.rest == b"data: {"


def test_take_ids_leaves_what_vllm_sends_without_the_flag() -> None:
    frame, prompt, ids = take_ids(CHAT[0])
    assert prompt == [1, 9690, 198, 2683, 359, 253, 5356, 1] and ids is None
    assert frame == CHAT_PLAIN_FIRST
    frame, prompt, ids = take_ids(CHAT[2])
    assert prompt is None and ids == [6153] and b'"token_ids":null' in frame
    frame, prompt, ids = take_ids(COMPLETION[0])
    assert prompt == [504, 3575, 282, 4649, 314] and ids == [7042]
    assert b'"prompt_token_ids":null,"token_ids":null' in frame


def test_facts() -> None:
    assert facts(take_ids(CHAT[0])[0]).text_empty
    assert not facts(take_ids(CHAT[1])[0]).text_empty
    last = facts(take_ids(CHAT[4])[0])
    assert last.finished and not last.usage
    assert facts(CHAT[5]).usage and facts(CHAT[6]).done
    assert not facts(take_ids(COMPLETION[1])[0]).text_empty
