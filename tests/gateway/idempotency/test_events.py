"""The pure part of a keyed stream's events: each SSE event gets its ``id:``, wherever the chunks cut."""

from __future__ import annotations

from gateway.idempotency.events import EventIds, last_event_id


def test_every_event_gets_the_next_id_wherever_the_chunks_cut_it() -> None:
    ids = EventIds()
    first = ids.feed(b"data: a\n\nda")
    second = ids.feed(b"ta: b\n")
    third = ids.feed(b"\nevent: x\ndata: c\n\ndata: [DONE]\n\n")
    assert first == [(1, b"id: 1\ndata: a\n\n")] and second == []
    assert third == [
        (2, b"id: 2\ndata: b\n\n"),
        (3, b"id: 3\nevent: x\ndata: c\n\n"),
        (4, b"id: 4\ndata: [DONE]\n\n"),
    ]
    assert ids.tail() == []


def test_an_unfinished_last_event_comes_as_it_came_under_the_next_id() -> None:
    ids = EventIds()
    ids.feed(b"data: a\n\ndata: cut")
    assert ids.tail() == [(2, b"data: cut")]


def test_last_event_id_is_a_number_or_nothing() -> None:
    assert last_event_id(" 12 ") == 12
    assert last_event_id(None) is None and last_event_id("abc") is None and last_event_id("") is None
