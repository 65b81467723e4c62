"""A gateway process (`llmgw-gateway`) told to stop with SIGTERM, with requests still running on the FAKE
ENGINE: after its grace period a stream ends with an SSE error event then `data: [DONE]`, a non-streamed
request gets a 503 in OpenAI's shape, and the process exits; no client is cut off."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.shutdown import OpenRequests
from testing.gateway import fleet_yaml, register, wait_ready
from testing.poll import until
from testing.procs import Proc, free_port, spawn, start_fake_engine

FLEET = fleet_yaml(
    [
        {"name": "streamed", "source": {"path": "/x"}, "policy": "round_robin"},
        {"name": "whole", "source": {"path": "/x"}, "policy": "round_robin"},
    ]
)
ASK = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 500}


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Proc]]:
    tmp = tmp_path_factory.mktemp("engines")
    procs = {
        "streamed": start_fake_engine(tmp, "--delay-ms", "100"),  # 500 events: 50 s
        "whole": start_fake_engine(tmp, "--latency-ms", "60000"),
    }
    yield procs
    for p in procs.values():
        p.stop()


def spawn_gateway(tmp: Path, redis_url: str, prefix: str) -> Proc:
    fleet_file = tmp / "fleet.yaml"
    fleet_file.write_text(FLEET)
    port = free_port()
    env = {
        "LLMGW_FLEET_FILE": str(fleet_file),
        "LLMGW_REDIS_URL": redis_url,
        "LLMGW_REDIS_PREFIX": prefix,
        "LLMGW_REGISTRY_POLL_S": "0.2",
        "LLMGW_SHUTDOWN_GRACE_S": "0.5",
    }
    gateway = str(Path(sys.executable).parent / "llmgw-gateway")
    return spawn([gateway, "--port", str(port)], port, tmp / "gateway.log", env)


async def started(c: httpx.AsyncClient, engine: Proc) -> bool:
    return bool((await c.get(f"{engine.url}/stats")).json()["started"] >= 1)


async def test_sigterm_ends_open_requests_in_the_apis_shape(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    prefix = f"s{uuid.uuid4().hex[:8]}"
    for name, engine in engines.items():
        await register(redis_url, prefix, name, engine.url, f"{name}-0")
    proc = spawn_gateway(tmp_path, redis_url, prefix)
    try:
        async with httpx.AsyncClient(timeout=60) as c:
            await wait_ready(c, proc.url, deadline_s=20)
            whole = asyncio.create_task(
                c.post(f"{proc.url}/v1/chat/completions", json={"model": "whole", **ASK})
            )
            await until(lambda: started(c, engines["whole"]), 10, "the request reached the engine")
            body = {"model": "streamed", "stream": True, **ASK}
            async with c.stream("POST", f"{proc.url}/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                received = b""
                async for chunk in r.aiter_bytes():
                    if not received:
                        proc.popen.send_signal(signal.SIGTERM)
                    received += chunk
            answer = await whole
        assert await asyncio.to_thread(proc.popen.wait, 20) is not None
    finally:
        proc.stop()
    events = received.decode().split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    error = json.loads(events[-3].removeprefix("data: "))["error"]
    assert error["code"] == "gateway_shutting_down" and error["type"] == "service_unavailable"
    assert 1 <= len(events) - 3 < 500  # some tokens came, then the planned end: never all 500
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "gateway_shutting_down"
    assert answer.headers["retry-after"]
    assert "Cancel" not in (tmp_path / "gateway.log").read_text()  # uvicorn never had to cut one


async def test_sighup_is_logged_and_ignored_and_a_stream_in_flight_ends_whole(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    """SIGHUP's default action would kill the gateway and cut its streams without their error event
    (a closed terminal, a keeper that forwards it): it is logged once and changes nothing."""
    prefix = f"h{uuid.uuid4().hex[:8]}"
    await register(redis_url, prefix, "streamed", engines["streamed"].url, "streamed-0")
    proc = spawn_gateway(tmp_path, redis_url, prefix)
    try:
        async with httpx.AsyncClient(timeout=60) as c:
            await wait_ready(c, proc.url, deadline_s=20)
            body = {"model": "streamed", "stream": True, **ASK, "max_tokens": 10}  # 10 events: 1 s
            async with c.stream("POST", f"{proc.url}/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                received = b""
                async for chunk in r.aiter_bytes():
                    if not received:
                        proc.popen.send_signal(signal.SIGHUP)
                    received += chunk
            assert proc.popen.poll() is None
            assert (await c.get(f"{proc.url}/health")).status_code == 200
    finally:
        proc.stop()
    events = received.decode().split("\n\n")
    assert events[-2] == "data: [DONE]" and '"error"' not in received.decode()
    assert len(events) - 2 >= 10
    assert (tmp_path / "gateway.log").read_text().count("SIGHUP") == 1


async def test_open_requests_end_only_after_the_grace_and_only_those_still_open() -> None:
    ended: list[str] = []
    reqs = OpenRequests(grace_s=0.2)
    done = reqs.open(lambda: ended.append("done"))
    reqs.open(lambda: ended.append("running"))
    reqs.close(done)
    reqs.stop()
    assert ended == [] and reqs.stopping
    assert reqs._task is not None
    await reqs._task
    assert ended == ["running"]
    await reqs.aclose()


async def test_open_requests_that_all_end_in_the_grace_are_not_ended() -> None:
    ended: list[str] = []
    reqs = OpenRequests(grace_s=30)
    token = reqs.open(lambda: ended.append("x"))
    reqs.stop()
    reqs.close(token)
    assert reqs._task is not None
    await asyncio.wait_for(reqs._task, 5)
    assert ended == []
