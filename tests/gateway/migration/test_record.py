"""The recorder on recorded frames: ids, the clean seam, the seen tail, finish, usage, identity."""

from __future__ import annotations

import pytest

from gateway.migration.record import SETTLE_EVERY, MalformedFrame, Recorder
from gateway.migration.seam import ending
from tests.gateway.migration.frames_recorded import CHAT, CHAT_PLAIN_FIRST, COMPLETION, UTF8


def test_records_a_chat_stream_and_strips_ids() -> None:
    rec = Recorder()
    out = [rec.original(e) for e in CHAT]
    rec.analyse()  # what the hot path only recorded
    assert out[0] == CHAT_PLAIN_FIRST and all(b'token_ids":[' not in o for o in out)
    assert rec.prompt_ids == [1, 9690, 198, 2683, 359, 253, 5356, 1]
    assert rec.ids == [504, 6153, 314, 3789] and rec.clean == 4 and rec.seen_tail == ""
    assert rec.finish_reason == "length" and rec.usage_sent and rec.done
    assert rec.usage() == (8, 4)
    ident = rec.identity
    assert (ident.id, ident.created, ident.model) == ("chatcmpl-9d1c", 1764870000, "smollm2")
    assert ident.object == "chat.completion.chunk" and ident.template is not None


def test_client_that_asked_for_ids_keeps_them() -> None:
    rec = Recorder(keep_ids=True)
    assert [rec.original(e) for e in CHAT] == CHAT


def test_clean_seam_stops_before_held_back_bytes() -> None:
    rec = Recorder()
    for event in UTF8:
        rec.original(event)
    rec.analyse()
    # five ids in one frame (text seen: "Hello 日本"), then one id whose text is held back
    assert rec.ids == [19556, 17097, 241, 115, 40993, 179]
    assert rec.clean == 0 and rec.seen_tail == "Hello 日本"
    assert not rec.finished and rec.usage() == (3, 6)


def test_a_single_token_frame_with_text_moves_the_seam() -> None:
    rec = Recorder()
    rec.add([5, 6], "ab")
    rec.add([7], None)
    assert (rec.clean, rec.seen_tail) == (0, "ab")
    rec.add([8], "c")
    assert (rec.clean, rec.seen_tail) == (4, "")


def test_malformed_frame_is_a_trigger() -> None:
    with pytest.raises(MalformedFrame):
        Recorder().original(b"data: <html>502</html>\n\n")


def test_completion_frames_lose_both_arrays_and_keep_the_prompt() -> None:
    rec = Recorder()
    out = [rec.original(e) for e in COMPLETION]
    assert all(b'"prompt_token_ids":null,"token_ids":null' in o for o in out)
    assert rec.prompt_ids == [504, 3575, 282, 4649, 314] and rec.usage() == (5, 2)
    rec.analyse()
    assert rec.ids == [7042, 30] and rec.clean == 2 and rec.pending == []


def token_frame(i: int, text: str, finish: str | None = None) -> bytes:
    reason = f'"{finish}"' if finish else "null"
    return (
        b'data: {"id":"chatcmpl-9d1c","object":"chat.completion.chunk","created":1764870000,'
        b'"model":"smollm2","choices":[{"index":0,"delta":{"content":"'
        + text.encode()
        + b'"},"logprobs":null,"finish_reason":'
        + reason.encode()
        + b',"token_ids":['
        + str(i).encode()
        + b"]}]}\n\n"
    )


def test_a_long_stream_keeps_its_ids_not_its_frames() -> None:
    """Frames are settled in batches: the ids kept, the frames dropped."""
    rec, n = Recorder(), 100
    rec.original(CHAT[0])
    for i in range(n):
        rec.original(token_frame(1000 + i, f"t{i}", "length" if i == n - 1 else None))
        assert len(rec.pending) < SETTLE_EVERY
    rec.analyse()
    assert rec.ids == [1000 + i for i in range(n)] and rec.clean == n and rec.finished
    assert rec.identity.template is not None and rec.usage() == (8, n)


@pytest.mark.parametrize("held_back", [range(60, 64), range(29, 33), range(31, 40)])
def test_held_back_tokens_across_a_batch_end_stay_after_the_clean_seam(held_back: range) -> None:
    """The clean seam of a stream that breaks just after tokens whose text was held back (empty), where
    they straddle a batch's end: that of a frame-by-frame reading."""
    rec = Recorder()
    rec.original(CHAT[0])
    for i in range(held_back.stop):
        rec.original(token_frame(1000 + i, "" if i in held_back else f"t{i}"))
    rec.analyse()
    assert rec.ids == [1000 + i for i in range(held_back.stop)] and rec.clean == held_back.start
    assert not rec.finished and rec.seen_tail == ""


def test_frames_read_together_are_recorded_as_one_by_one() -> None:
    """Several one-token frames in one read: one regex split records and strips them all; a read with
    any other event is left to the caller (None), which splits it into events."""
    rec, one = Recorder(), Recorder()
    out = [rec.original(CHAT[0]), rec.tokens(b"".join(CHAT[1:4]))]
    assert rec.tokens(b"".join(CHAT[4:])) is None  # the usage and [DONE]: not frames of one token
    out += [rec.original(e) for e in CHAT[4:]]
    assert b"".join(out) == b"".join(one.original(e) for e in CHAT)
    rec.analyse()
    one.analyse()
    assert (rec.ids, rec.clean, rec.finish_reason, rec.usage()) == (one.ids, one.clean, "length", (8, 4))
    held = Recorder()
    held.original(CHAT[0])
    assert held.tokens(b"".join(CHAT[1:3]) + UTF8[2]) is not None and held.usage() == (8, 3)
    held.analyse()
    assert held.ids == [504, 6153, 179] and held.clean == 2 and held.identity.template is not None


def test_the_first_frame_is_parsed_only_when_a_continuation_needs_it() -> None:
    for frames in (CHAT, COMPLETION):
        rec = Recorder()
        out = rec.original(frames[0])
        assert b'prompt_token_ids":[' not in out and rec.prompt_raw is not None
        assert rec.identity.id == ""  # not parsed on the hot path
        rec.analyse()
        assert rec.identity.id == frames[0].split(b'"id":"')[1].split(b'"')[0].decode()
    rec = Recorder(keep_ids=True)
    assert rec.original(COMPLETION[0]) == COMPLETION[0] and rec.ids == [] and rec.usage() == (5, 1)


def test_the_gateways_own_usage_event_is_recorded_and_not_passed_on() -> None:
    rec = Recorder(drop_usage=True)
    out = [rec.original(e) for e in CHAT]
    assert out[5] == b"" and b'"usage"' not in b"".join(out) and out[6] == CHAT[6]
    assert rec.usage_sent and rec.usage() == (8, 4)
    assert ending(rec, wants_usage=True) == []  # usage was had, [DONE] too
    cut = Recorder(drop_usage=True)
    for event in CHAT[:5]:  # the replica failed after the last token: the gateway ends the stream
        cut.original(event)
    assert ending(cut, wants_usage=True) == [b"data: [DONE]\n\n"] and cut.usage_sent
