"""How bench/chaos.py sorts an outcome (answered, clear error in the API's shape, or lost: silent) and
counts generations at the engines from vLLM's request log."""

from __future__ import annotations

import json
from pathlib import Path

from bench.chaos import LOG_REQUESTS, PhaseResult, Tally, with_request_logs
from bench.faults.checks import ANSWERED, CLEAR, LOST, count_engine_runs, judge_stream, judge_whole

ERROR = json.dumps(
    {"error": {"message": "replica failed", "type": "server_error", "param": None, "code": "x"}}
)


def test_whole_answers() -> None:
    assert judge_whole(200, b'{"choices": [{"text": "hi"}]}')[0] == ANSWERED
    assert judge_whole(200, b'{"data": [{"embedding": [0.1]}]}')[0] == ANSWERED
    assert judge_whole(503, ERROR.encode())[0] == CLEAR
    assert judge_whole(502, b"<html>bad gateway</html>")[0] == LOST  # an error not in the API's shape
    assert judge_whole(200, b'{"choices": []}')[0] == LOST
    assert judge_whole(200, b"not json")[0] == LOST


def test_streams() -> None:
    assert judge_stream([b'{"choices": []}', b"[DONE]"])[0] == ANSWERED
    assert judge_stream([b'{"choices": []}', ERROR.encode(), b"[DONE]"])[0] == CLEAR
    assert judge_stream([b'{"choices": []}'])[0] == LOST  # ended without [DONE]: a silent truncation
    assert judge_stream([])[0] == LOST


def received(request_id: str, suffix: str = "0123456789ab", endpoint: str = "chatcmpl-") -> str:
    """A line of vLLM's request log (``--enable-log-requests``) for the id the gateway passed on."""
    return (
        f"INFO 12-03 12:00:00 [request_logger.py:66] Received request {endpoint}{request_id}-{suffix}: "
        "params: SamplingParams(n=1, max_tokens=16), lora_request: None.\n"
    )


def test_engine_runs_tell_a_rerun_after_a_kill_from_a_generation_run_twice(tmp_path: Path) -> None:
    p = "chaos.ab12.3."
    killed, other = tmp_path / "m-0.log", tmp_path / "m-1.log"
    # m-0 took 1, 2 and 3, then was killed -9 (its log cut there); its successor took 5 in the same file
    before = received(p + "1") + received(p + "2", endpoint="cmpl-") + received(p + "3")
    killed.write_text(before + "INFO starting again\n" + received(p + "5"))
    # m-1 took 2 again (the retry of a request in flight on the killed replica), 4 twice (ran twice),
    # 6 with a completion's prompt index, and a request of another phase
    other.write_text(
        received(p + "2", "ffffffffffff") + received(p + "4") + received(p + "4", "aaaaaaaaaaaa")
        + received(p + "6", endpoint="cmpl-").replace("0123456789ab:", "0123456789ab-0:")
        + received("chaos.ab12.4.1")
    )  # fmt: skip
    runs = count_engine_runs([killed, other], p, {killed: len(before)})
    assert runs.ids == {p + str(i) for i in range(1, 7)}
    assert runs.rerun_after_kill == [p + "2"]
    assert runs.ran_twice == [p + "4"]
    assert runs.by_replica == {"m-0": 4, "m-1": 4}


def test_request_logs_are_turned_on_for_every_model() -> None:
    fleet = with_request_logs({"models": [{"name": "a"}, {"name": "b", "engine": {"extra_args": ["--x"]}}]})
    assert [m["engine"]["extra_args"] for m in fleet["models"]] == [[LOG_REQUESTS], ["--x", LOG_REQUESTS]]


def test_a_continuation_of_a_migrated_generation_is_not_a_second_run(tmp_path: Path) -> None:
    p = "chaos.ab12.7."
    frozen, other = tmp_path / "m-0.log", tmp_path / "m-1.log"
    # m-0 was frozen with request 1 in flight (alive again later); the gateway continued it on m-1
    frozen.write_text(received(p + "1"))
    other.write_text(received(p + "1").replace("0123456789ab:", "0123456789ab-move1:") + received(p + "2"))
    runs = count_engine_runs([frozen, other], p, {})
    assert runs.ran_twice == [] and runs.moved == {p + "1": 1}
    assert runs.ids == {p + "1", p + "2"}


def test_a_non_streamed_request_run_again_whole_is_a_second_run(tmp_path: Path) -> None:
    p = "chaos.ab12.8."
    frozen, other = tmp_path / "m-0.log", tmp_path / "m-1.log"
    # a request that cannot move (logprobs, n > 1, ...) ran again whole on m-1 (-rerun1): a second
    # generation (m-0 was frozen, not killed: it ran twice), not a continuation
    frozen.write_text(received(p + "1"))
    other.write_text(received(p + "1").replace("0123456789ab:", "0123456789ab-rerun1:"))
    runs = count_engine_runs([frozen, other], p, {})
    assert runs.ran_twice == [p + "1"] and runs.moved == {}


def test_replica_faults_must_leave_no_stream_broken() -> None:
    tally = Tally()
    tally.add("chat-stream", ANSWERED)
    tally.add("chat", CLEAR, "504 upstream_timeout")  # a request that found the frozen replica: allowed
    assert not PhaseResult("freeze replica", "", tally).failed
    tally.add("chat-stream", CLEAR, "stream upstream_error")  # a stream ended by the error event
    assert PhaseResult("freeze replica", "", tally).failed
    assert not PhaseResult("kill -9 gateway", "", tally).failed  # other faults: a clear error is fine
