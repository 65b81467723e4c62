"""bench/residency/live.py's replay against a server that answers the warm-up and then holds every stream:
with ``drain_s`` the requests still unanswered that long after the last one was sent are cancelled, each
an error (the GPU recipe's bound on its device time), instead of waiting for ever."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.residency.live import replay
from bench.residency.stack import Observed, Running
from bench.residency.trace import Request

ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    b"data: {}\n\ndata: [DONE]\n\n"
)


async def test_requests_unanswered_after_the_drain_are_cancelled_as_errors(tmp_path: Path) -> None:
    asked, released = 0, asyncio.Event()  # never set: the trace's streams are held until the server closes

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal asked
        await reader.readuntil(b"\r\n\r\n")
        asked += 1
        if asked > 1:  # the warm-up's one request answers; the trace's are held
            await released.wait()
        writer.write(ANSWER)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    obs = Observed(slots={"m0": "awake"})
    run = Running(f"http://127.0.0.1:{port}", obs, [0.0], tmp_path / "supervisor.log")
    trace = [Request(0.0, "m0", 2.0), Request(0.5, "m0", 2.0)]
    async with server:
        recs = await asyncio.wait_for(replay(run, trace, 0.01, settle_s=1.0, drain_s=0.2), 10)
    assert [r.error for r in recs] == ["cancelled: no answer 0.2 s after the trace's last request"] * 2
    assert [r.state for r in recs] == ["awake", "awake"]
