"""A background response's events as the gateway makes them from the replica's stream (pure)."""

from __future__ import annotations

import orjson

from gateway.responses_api.background_events import (
    Renumbered,
    initial,
    is_background,
    new_id,
    upstream_body,
)


def sse(kind: str, doc: dict[str, object]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **doc}) + b"\n\n"


UP = [
    sse("response.created", {"sequence_number": 5, "response": {"id": "resp_up1", "status": "in_progress"}}),
    sse("response.output_text.delta", {"sequence_number": 6, "item_id": "msg_resp_up1", "delta": "hi"}),
    sse("response.completed", {"sequence_number": 7, "response": {"id": "resp_up1", "status": "completed"}}),
]


def docs(events: list[tuple[int, bytes]]) -> list[dict[str, object]]:
    return [orjson.loads(e.split(b"data: ", 1)[1]) for _, e in events]


def test_events_are_numbered_from_zero_under_the_gateways_id_however_the_chunks_cut_them() -> None:
    rid = new_id()
    r = Renumbered(rid, initial(rid, {"model": "m"}))
    whole = b": waiting for m\n\n" + b"".join(UP) + b"data: [DONE]\n\n"
    events = [e for i in range(0, len(whole), 7) for e in r.feed(whole[i : i + 7])]
    got = docs(events)
    assert [e[0] for e in events] == [0, 1, 2] and [d["sequence_number"] for d in got] == [0, 1, 2]
    assert got[0]["response"] == {"id": rid, "status": "in_progress", "background": True}
    assert got[1]["item_id"] == f"msg_{rid}" and events[1][1].startswith(b"event: response.output_text")
    assert r.status == "completed" and r.obj["id"] == rid and r.ended() == []


def test_a_stream_cut_before_its_last_event_or_broken_by_the_gateway_fails_the_response() -> None:
    rid = new_id()
    cut = Renumbered(rid, initial(rid, {}))
    cut.feed(UP[0])
    ((seq, event),) = cut.ended()
    assert (
        seq == 1
        and b"event: error" in event
        and cut.status == "failed"
        and cut.obj["error"]["code"] == "server_error"
    )
    broken = Renumbered(rid, initial(rid, {}))
    err = b'data: {"error":{"message":"replica gone","type":"x","code":"upstream_error"}}\n\ndata: [DONE]\n\n'
    (doc,) = docs(broken.feed(UP[0] + err))[1:]
    assert doc == {"type": "error", "code": "upstream_error", "message": "replica gone", "param": None,
                   "sequence_number": 1}  # fmt: skip
    assert broken.status == "failed" and broken.ended() == []


def test_the_first_answer_is_queued_and_the_replica_gets_a_plain_stream() -> None:
    rid = new_id()
    obj = initial(rid, {"model": "m", "background": True, "instructions": "be brief", "input": "x"})
    assert obj["status"] == "queued" and obj["background"] is True and obj["instructions"] == "be brief"
    assert "input" not in obj and is_background(rid) and not is_background("resp_0a1b")
    sent = orjson.loads(upstream_body({"model": "m", "background": True, "store": True, "input": "x"}))
    assert sent == {"model": "m", "input": "x", "stream": True, "store": False}
