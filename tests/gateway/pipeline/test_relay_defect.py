"""A defect in the gateway's own relay (not the replica's failure) after a stream started: the client
still gets the stream's planned end, an SSE error event in the API's shape and ``[DONE]``, and the
failure is logged with its stack and counted; the replica is not blamed (the FAKE ENGINE serves). Both
relays: a stream that may move (``MigratingStream``) and one that may not (its usage strip)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.migration.stream import MigratingStream
from gateway.pipeline.usage import UsageStrip
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import Proc, start_fake_engine

STREAM = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "stream": True}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("engine"))
    yield proc
    proc.stop()


def inject_defect(monkeypatch: pytest.MonkeyPatch, migrates: bool) -> None:
    """The relay step each chunk passes through raises the first time (the FAKE ENGINE's few events may
    come in one or two reads)."""
    cls, name = (MigratingStream, "next") if migrates else (UsageStrip, "feed")
    real, calls = getattr(cls, name), [0]

    def defective(self: object, *args: object) -> object:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("a defect in the relay")
        return real(self, *args)

    monkeypatch.setattr(cls, name, defective)


@pytest.mark.parametrize("migrates", [True, False])
async def test_a_relay_defect_ends_the_stream_with_its_error_event(
    tmp_path: Path,
    redis_url: str,
    engine: Proc,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    migrates: bool,
) -> None:
    inject_defect(monkeypatch, migrates)
    fleet = fleet_yaml([{"name": "m", "source": {"path": "/x"}, "migration": migrates}])
    prefix = f"d{uuid.uuid4().hex[:8]}"
    await register(redis_url, prefix, "m", engine.url, "m-0")
    async with serve_gateway(tmp_path, fleet, redis_url, prefix) as gw:
        async with httpx.AsyncClient(timeout=20) as c:
            r = await c.post(f"{gw}/v1/chat/completions", json=STREAM)
            metrics = (await c.get(f"{gw}/metrics")).text
    events = [e.removeprefix("data: ") for e in r.text.strip().split("\n\n")]
    assert r.status_code == 200
    assert events[-1] == "[DONE]", r.text
    error = json.loads(events[-2])["error"]
    assert error["type"] == "server_error" and "relay" in error["message"], error
    assert 'llmgw_stream_errors_total{model="m"} 1.0' in metrics
    assert 'llmgw_ejections_total{model="m",replica="m-0"}' not in metrics  # not the replica's fault
    failed = [r for r in caplog.records if "relay failed" in r.getMessage()]
    assert failed and failed[0].exc_info is not None  # one line with the request id, and its stack
