"""The fault suite's checkers (bench/faults/checks.py), each on evidence written here: no I/O."""

from __future__ import annotations

import json

from bench.faults.checks import (
    ANSWERED,
    CLEAR,
    CUT,
    DROPPED,
    LOST,
    Exit,
    KeyState,
    Outcome,
    ProcInfo,
    capacity_held,
    client_report,
    count_runs,
    failures_delta,
    inflight_count,
    judge_stream,
    judge_whole,
    needless_errors,
    not_dropped,
    orphans,
    registry_back_s,
    stalled_rise,
    stalled_total,
    task_deaths,
    task_failures,
    task_failures_rise,
)

OPENAI_ERROR = json.dumps({"error": {"message": "replica failed", "type": "server_error", "code": "x"}})
ANTHROPIC_ERROR = json.dumps({"type": "error", "error": {"type": "api_error", "message": "replica failed"}})


def received(rid: str, suffix: str = "0123456789ab") -> bytes:
    return f"INFO Received request chatcmpl-{rid}-{suffix}: params: ...\n".encode()


def test_answers_in_every_apis_shape() -> None:
    for body in (
        '{"choices": [1]}',
        '{"data": [1]}',
        '{"output": [1]}',
        '{"content": [1]}',
        '{"results": [1]}',
    ):
        assert judge_whole(200, body.encode())[0] == ANSWERED
    assert judge_whole(502, OPENAI_ERROR.encode()) == (CLEAR, "502 x")
    assert judge_whole(529, ANTHROPIC_ERROR.encode()) == (CLEAR, "529 api_error")
    assert judge_whole(502, b"<html>bad gateway</html>")[0] == LOST
    assert judge_whole(200, b'{"choices": []}')[0] == LOST


def test_a_stream_ends_with_its_apis_last_event_or_an_error_event() -> None:
    assert judge_stream([b'{"choices": []}', b"[DONE]"])[0] == ANSWERED
    assert judge_stream([b'{"type":"message_stop"}'])[0] == ANSWERED
    assert judge_stream([b'{"type": "response.completed", "response": {}}'])[0] == ANSWERED
    assert judge_stream([b'{"choices": []}', OPENAI_ERROR.encode(), b"[DONE]"])[0] == CLEAR
    assert judge_stream([b'{"type":"message_start"}', ANTHROPIC_ERROR.encode()])[0] == CLEAR
    assert judge_stream([b'{"choices": []}'])[0] == LOST
    assert judge_stream([])[0] == LOST


def test_client_report_splits_requests_without_an_answer_from_cut_streams() -> None:
    outs = [
        Outcome("chat", False, ANSWERED),
        Outcome("chat", False, CLEAR, "502 upstream_error"),
        Outcome("chat", False, LOST, "client timeout"),
        Outcome("chat-stream", True, CUT, "RemoteProtocolError"),
        Outcome("chat-stream", True, LOST, "stream cut after 3 events"),
    ]
    r = client_report(outs, gateway_killed=False)
    assert (r.sent, r.answered, r.clear) == (5, 1, 1)
    assert r.no_answer == ["chat: lost client timeout"]
    assert len(r.cut_streams) == 2
    # a killed gateway may cut the streams it served (nginx cannot append an error event), never end one
    # cleanly without its last event
    assert client_report(outs, gateway_killed=True).cut_streams == [
        "chat-stream: lost stream cut after 3 events"
    ]


def test_generations_per_request_id() -> None:
    p = "flt.run.3."
    logs = {
        # m-0 took 1 and 2, then was killed -9 (cut there); its successor took 5 in the same file
        "m-0": received(p + "1") + received(p + "2") + b"starting again\n" + received(p + "5"),
        # m-1 took 2 again (after the kill: allowed), 4 twice (ran twice: the stale keep-alive re-send),
        # a continuation of 5 (-move1: the same generation), and a request of another cell
        "m-1": received(p + "2", "ffffffffffff") + received(p + "4") + received(p + "4", "aaaaaaaaaaaa")
        + received(p + "5", "0123456789ab-move1") + received("flt.run.4.1"),
    }  # fmt: skip
    cut = len(received(p + "1") + received(p + "2"))
    runs = count_runs(logs, p, {"m-0": cut})
    assert runs.ids == {p + "1", p + "2", p + "4", p + "5"}
    assert runs.rerun_after_kill == [p + "2"]
    assert runs.ran_twice == [p + "4"]
    assert runs.moved == {p + "5": 1}
    # a replica that crashed by itself has no cut: a re-send elsewhere is a second generation
    assert count_runs(logs, p, {}).ran_twice == [p + "2", p + "4"]


def test_fake_engine_ids_without_an_endpoint_prefix_are_counted_too() -> None:
    runs = count_runs({"m": b"Received request flt.a.1.7-00112233aabb\n"}, "flt.a.1.", {})
    assert runs.ids == {"flt.a.1.7"}


def test_capacity_held_after_the_run() -> None:
    keys = [
        KeyState("llmgw:adm:{m}:leases", "zset", 2),
        KeyState("llmgw:adm:{m}:queue", "zset", 0),
        KeyState("llmgw:adm:{m}:waiters", "hash", 1),
        KeyState("llmgw:adm:{m}:wake:t1", "list", 1),
        KeyState("llmgw:adm:{m}:alive", "hash", 2),  # presence, not capacity
        KeyState("llmgw:adm:{m}:clock", "hash", 3),  # fair-share tags: not judged alone
        KeyState("llmgw:inflight:{m}", "hash", 2, total=1),
        KeyState("llmgw:inflight:{n}", "hash", 2, total=0),
        KeyState("llmgw:rate:{abc}", "hash", 2, ttl_s=-1),
        KeyState("llmgw:rate:{def}", "hash", 2, ttl_s=50),
    ]
    assert capacity_held(keys) == [
        "llmgw:adm:{m}:leases: 2 held",
        "llmgw:adm:{m}:waiters: 1 held",
        "llmgw:adm:{m}:wake:t1: 1 held",
        "llmgw:inflight:{m}: 1 in flight",
        "llmgw:rate:{abc}: no expiry",
    ]


def test_inflight_fields_are_stamped_json_counts() -> None:
    assert inflight_count('1733390000000 {"m-0":2,"m-1":1}') == 3
    assert inflight_count("1733390000000 {}") == 0
    assert inflight_count("garbage") == 0


def test_task_failures_from_metrics() -> None:
    text = (
        "# TYPE llmgw_task_failures_total counter\n"
        'llmgw_task_failures_total{task="registry"} 2.0\n'
        'llmgw_task_failures_total{task="health"} 0.0\n'
        "llmgw_requests_total 5\n"
    )
    after = task_failures(text)
    assert after == {'{task="registry"}': 2.0, '{task="health"}': 0.0}
    assert failures_delta({'{task="registry"}': 1.0}, after) == {'{task="registry"}': 1.0}


def test_counters_rise_per_process_and_across_a_restart() -> None:
    """Each process' counter on its own (joined texts let one gateway's line hide the other's), and a
    counter that went down is a process restarted in the cell: its rise is its value now. A gateway killed
    -9 and started again after an earlier cell counted a slow reader read as a rise of -1 stalls."""
    gw1_before = 'llmgw_stream_stalled_total{model="chat"} 1.0\nllmgw_task_failures_total{task="x"} 1.0\n'
    gw1_after = 'llmgw_stream_stalled_total{model="chat"} 0.0\nllmgw_task_failures_total{task="x"} 0.0\n'
    gw2 = 'llmgw_stream_stalled_total{model="chat"} 0.0\nllmgw_task_failures_total{task="x"} 0.0\n'
    assert stalled_rise([gw1_before, gw2], [gw1_after, gw2]) == 0.0  # restarted, counted nothing since
    assert not_dropped([], stalled_rise([gw1_before, gw2], [gw1_after, gw2]), {}) == []
    assert stalled_rise([gw1_before, gw2], [gw1_before.replace("1.0", "3.0"), gw2]) == 2.0
    assert stalled_rise([gw1_before.replace("1.0", "3.0")], [gw1_before]) == 1.0  # restarted, counted one
    assert stalled_rise([""], [gw1_before]) == 1.0  # unreachable before (down): it counted one since
    # gateway-1's failure is not hidden by gateway-2's line of the same label (joined, the last one won)
    gw1_failed = gw1_before.replace('"x"} 1.0', '"x"} 2.0')
    assert task_failures_rise([gw1_before, gw2], [gw1_failed, gw2]) == {'{task="x"}': 1.0}
    assert task_failures_rise([gw1_before, gw2], [gw1_after, gw2]) == {}  # restarted: nothing since
    assert task_failures_rise([gw1_failed], [gw1_before]) == {'{task="x"}': 1.0}  # restarted, one since
    assert failures_delta({'{task="x"}': 3.0}, {'{task="x"}': 1.0}) == {'{task="x"}': 1.0}


def test_task_deaths() -> None:
    # gateway-1 was killed -9 by the fault; gateway-2 died of a SIGHUP (-1), which must not end it
    exits = [Exit("gateway-1", -9, asked=True), Exit("gateway-2", -1, asked=False)]
    assert task_deaths(exits, registry_back=True, owner_counted=False) == ["gateway-2 exited (-1) unasked"]
    assert task_deaths([], registry_back=False, owner_counted=True) == []
    assert task_deaths([], registry_back=False, owner_counted=False) == [
        "the registry never came back and no task failure was counted"
    ]


def test_orphans_are_unrecorded_processes_whose_parent_left_the_run() -> None:
    procs = [
        ProcInfo(100, 50, "python"),  # the driver
        ProcInfo(101, 100, "llmgw-workers"),
        ProcInfo(102, 101, "fake_engine"),  # a replica under its supervisor
        ProcInfo(103, 1, "fake_engine"),  # adopted by a new supervisor: in its state file
        ProcInfo(104, 1, "fake_engine"),  # started by a supervisor that died: in no state file
        ProcInfo(105, 104, "engine_core"),  # its child: its parent is of the run
    ]
    assert orphans(procs, own={100, 101, 102}, recorded={103}) == [ProcInfo(104, 1, "fake_engine")]


def test_seconds_until_the_registry_is_whole_and_stays_so() -> None:
    samples = [(10.0, False), (11.0, True), (12.0, False), (13.5, True), (14.0, True)]
    assert registry_back_s(samples, outage_end=10.0) == 3.5
    assert registry_back_s([(10.0, True)], outage_end=10.5) == 0.0
    assert registry_back_s([(10.0, True), (11.0, False)], outage_end=10.0) is None
    assert registry_back_s([], outage_end=10.0) is None


def test_needless_errors_leave_out_a_tenants_own_limit() -> None:
    outs = [
        Outcome("chat", False, ANSWERED),
        Outcome("chat", False, CLEAR, "429 rate_limit_exceeded"),
        Outcome("chat", False, CLEAR, "502 upstream_error"),
        Outcome("chat-stream", True, CLEAR, "stream upstream_error"),
    ]
    assert needless_errors(outs) == ["chat: 502 upstream_error", "chat-stream: stream upstream_error"]


def test_a_slow_reader_must_be_dropped_counted_and_its_generation_aborted() -> None:
    logs = {
        "chat-0": received("flt.1.7") + b"INFO Aborted request chatcmpl-flt.1.7-0123456789ab.\n",
        "chat-1": received("flt.1.8") + b"Aborted request flt.1.80-0123456789ab\n",  # another id
    }
    text = 'llmgw_stream_stalled_total{model="a"} 1.0\nllmgw_stream_stalled_total{model="b"} 2.0\n'
    assert stalled_total(text) == 3.0
    assert stalled_total("") == 0.0
    assert not_dropped(["flt.1.7"], 1.0, logs) == []
    assert not_dropped(["flt.1.8"], 1.0, logs) == ["flt.1.8: the engine's generation was not aborted"]
    assert not_dropped(["flt.1.7"], 0.0, logs) == ["llmgw_stream_stalled_total rose by 0, 1 expected"]
    assert not_dropped([], 0.0, logs) == []
    # the slow reader's own end: dropped is neither an answer, nor a clear error, nor a cut stream
    report = client_report([Outcome("slow-reader", True, DROPPED, "after 4 s")], gateway_killed=False)
    assert (report.sent, report.answered, report.clear, report.cut_streams) == (1, 0, 0, [])
