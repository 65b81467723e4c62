"""The FAKE ENGINE's options for the fault suite (testing/fake_engine.py): every generation logged by
request id on every API that runs the model, a prompt that ends the process once received, generations
late at run time, keep-alive connections closed when idle."""

from __future__ import annotations

import contextlib
import socket
import time
from functools import partial
from pathlib import Path

import httpx
import pytest

from testing.poll import wait_until
from testing.procs import start_fake_engine

CRASH, RESET = "CRASH-HERE", "RESET-HERE"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def logged(log: Path, rid: str) -> bool:
    return f"Received request {rid}\n" in log.read_text()


def aborted(log: Path, rid: str) -> bool:
    return f"Aborted request {rid}\n" in log.read_text()


def test_prompt_faults_health_delay_and_idle_close(tmp_path: Path) -> None:
    flags = ["--model", "m", "--enable-log-requests", "--exit-on-prompt", CRASH, "--crash-on", RESET]
    proc = start_fake_engine(tmp_path, *flags)
    try:
        with httpx.Client(base_url=proc.url, timeout=5) as c:
            # every API that runs the model logs its generation, not only chat/completions/embeddings
            for rid, path, body in [
                ("r-rerank", "/v1/rerank", {"model": "m", "query": "q", "documents": ["a"]}),
                ("r-messages", "/v1/messages", {**CHAT}),
                ("r-responses", "/v1/responses", {"model": "m", "input": "hi"}),
            ]:
                assert c.post(path, json=body, headers={"x-request-id": rid}).status_code == 200
                assert logged(proc.log, rid)
            # --crash-on: the connection closes once the request was received (and logged)
            body = {**CHAT, "messages": [{"role": "user", "content": RESET}]}
            with pytest.raises(httpx.RemoteProtocolError):
                c.post("/v1/chat/completions", json=body, headers={"x-request-id": "r-reset"})
            assert logged(proc.log, "r-reset")
            # generations late (a busy replica), then at once again
            assert c.get("/fault/latency?ms=300").status_code == 200
            started = time.monotonic()
            assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
            assert time.monotonic() - started >= 0.3
            c.get("/fault/latency?ms=0")
            assert c.get("/fault/latency?ms=soon").status_code == 400
            assert c.get("/fault/idle-close?ms=100").status_code == 200
        # a keep-alive connection idle past 100 ms is closed by the engine
        with socket.create_connection(("127.0.0.1", proc.port)) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
            s.settimeout(3)
            assert s.recv(4096) == b""  # closed, not timed out
        # a prompt that crashes the process once received
        body = {**CHAT, "messages": [{"role": "user", "content": CRASH}]}
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(f"{proc.url}/v1/chat/completions", json=body, headers={"x-request-id": "r-crash"})
        wait_until(lambda: proc.popen.poll() is not None, 5, "the engine exits")
        assert proc.popen.returncode == 1
        assert logged(proc.log, "r-crash")
    finally:
        proc.stop()


def test_a_stream_whose_client_leaves_is_logged_aborted_and_its_pace_is_a_knob(tmp_path: Path) -> None:
    """vLLM's ``Aborted request <id>`` (with --enable-log-requests) when a stream's connection closes
    before its end; ``/fault/delay?ms=N`` sets the gap between stream events at run time and
    ``/fault/event-bytes?n=N`` pads each event's text to N bytes (a long fast stream)."""
    proc = start_fake_engine(tmp_path, "--model", "m", "--enable-log-requests", "--delay-ms", "200")
    try:
        assert httpx.get(f"{proc.url}/fault/delay?ms=1").status_code == 200
        assert httpx.get(f"{proc.url}/fault/event-bytes?n=4096").status_code == 200
        for rid, ids in (("r-gone", ""), ("r-ids", ', "return_token_ids": true')):  # plain; token ids
            body = b'{"model": "m", "messages": [], "max_tokens": 60000, "stream": true%s}' % ids.encode()
            head = f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-request-id: {rid}\r\n"
            with socket.create_connection(("127.0.0.1", proc.port)) as s:
                s.sendall(f"{head}content-length: {len(body)}\r\n\r\n".encode() + body)
                got, started = b"", time.monotonic()
                while got.count(b"data:") < 100:  # 100 events well within 200 ms each: the knob's 1 ms
                    got += s.recv(65536)
                assert time.monotonic() - started < 5.0
                assert len(got) > 99 * 4096
            wait_until(partial(aborted, proc.log, rid), 5, "the abort logged")
            assert logged(proc.log, rid)
    finally:
        proc.stop()
