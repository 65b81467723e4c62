"""How bench/chaos.py sorts an outcome: answered, clear error (the API's shape), or lost (silent)."""

from __future__ import annotations

import json

from bench.chaos import ANSWERED, CLEAR, LOST, judge_stream, judge_whole

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
