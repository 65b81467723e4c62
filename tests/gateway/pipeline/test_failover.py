"""Failover with the FAKE ENGINE: a replica that refuses connections, answers 500, hangs before the
first byte, or dies mid-stream. The client sees a success after failover, or the SSE error event;
never a hang and never a 500."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import httpx
import pytest

from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import Proc, free_port, start_fake_engine

# a tool-call parser: the hop-by-hop test sends tools, which the gateway refuses to a model without one
FLEET = fleet_yaml(
    [
        {
            "name": "m",
            "source": {"path": "/x"},
            "policy": "round_robin",
            "engine": {"tool_call_parser": "hermes"},
        }
    ]
)
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Proc]]:
    tmp = tmp_path_factory.mktemp("engines")
    procs = {
        "good": start_fake_engine(tmp),
        "err500": start_fake_engine(tmp, "--fault", "500"),
        "hang": start_fake_engine(tmp, "--fault", "hang"),
        "die": start_fake_engine(tmp, "--fault", "die-after-3"),
        "die_mid": start_fake_engine(tmp, "--fault", "die-mid-2"),
        "stall": start_fake_engine(tmp, "--fault", "stall-after-2"),
        "err400": start_fake_engine(tmp, "--fault", "400"),
        "slow": start_fake_engine(tmp, "--latency-ms", "1500"),
        "slow2": start_fake_engine(tmp, "--latency-ms", "1500"),
        "hang2": start_fake_engine(tmp, "--fault", "hang"),
        "slow500": start_fake_engine(tmp, "--fault", "slow-500-600"),
        "slow500b": start_fake_engine(tmp, "--fault", "slow-500-600"),
        "err503": start_fake_engine(tmp, "--fault", "503"),
        "slow503": start_fake_engine(tmp, "--fault", "slow-503-600"),
        "slow503b": start_fake_engine(tmp, "--fault", "slow-503-600"),
    }
    yield procs
    for p in procs.values():
        p.stop()


def gateway(
    tmp: Path, redis_url: str, urls: list[str], **settings: float
) -> AbstractAsyncContextManager[str]:
    prefix = f"f{uuid.uuid4().hex[:8]}"

    async def setup() -> AsyncIterator[str]:
        for i, url in enumerate(urls):
            await register(redis_url, prefix, "m", url, f"m-{i}")
        async with serve_gateway(tmp, FLEET, redis_url, prefix, **settings) as gw:
            yield gw

    from contextlib import asynccontextmanager

    return asynccontextmanager(setup)()


def assert_error_shape(body: dict[str, dict[str, object]]) -> None:
    assert set(body["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("bad", ["refused", "err503"])
async def test_fails_over_before_first_byte(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc], bad: str
) -> None:
    bad_url = f"http://127.0.0.1:{free_port()}" if bad == "refused" else engines[bad].url
    urls = [bad_url, engines["good"].url]
    async with gateway(tmp_path, redis_url, urls, first_byte_timeout_s=1.0, health_interval_s=60) as gw:
        async with httpx.AsyncClient(timeout=20) as c:
            for _ in range(4):
                r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
                assert r.status_code == 200, r.text
                assert r.json()["choices"][0]["message"]["content"] == "".join(f"tok{i} " for i in range(6))
            metrics = (await c.get(f"{gw}/metrics")).text
    if bad == "refused":  # a connection refused ejects at once; a 503 counts toward a run of them
        assert 'llmgw_ejections_total{model="m",replica="m-0"} 1.0' in metrics
    if bad != "refused":  # a refusing replica also fails /health, which may eject it before any request
        retries = re.search(r'llmgw_retries_total\{model="m"\} ([0-9.]+)', metrics)
        assert retries is not None and 1 <= float(retries.group(1)) <= 3  # ejected on its third 503


async def test_all_replicas_failing_is_a_502_not_a_hang(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    async with gateway(tmp_path, redis_url, [engines["err503"].url, f"http://127.0.0.1:{free_port()}"]) as gw:
        async with httpx.AsyncClient(timeout=20) as c:
            r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
            assert r.status_code == 502
            assert_error_shape(r.json())
            # both are ejected now, but still in the registry: tried again (ejection is a guess), a 502
            r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
            assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_error"


async def test_stream_broken_mid_way_ends_with_error_event_then_done(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    async with gateway(tmp_path, redis_url, [engines["die"].url]) as gw:
        async with httpx.AsyncClient(timeout=20) as c:
            r = await c.post(f"{gw}/v1/chat/completions", json={**CHAT, "stream": True})
    # its only replica dies: nowhere to move
    events = [e.removeprefix("data: ") for e in r.text.strip().split("\n\n")]
    assert r.status_code == 200
    assert len(events) == 5 and events[-1] == "[DONE]"
    assert [json.loads(e)["choices"][0]["delta"]["content"] for e in events[:3]] == [
        "tok0 ",
        "tok1 ",
        "tok2 ",
    ]
    error = json.loads(events[3])
    assert_error_shape(error)
    assert error["error"]["type"] == "upstream_error"


async def test_stream_broken_mid_event_gets_its_error_event_apart(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    # The replica dies after two events and half of the third: the half event is ended first, so the
    # error event and [DONE] are events of their own (an SSE client can still read them). A request that
    # cannot move (logprobs) is relayed as it comes; one that may move is relayed event by event, so the
    # half event never reaches the client.
    async with gateway(tmp_path, redis_url, [engines["die_mid"].url]) as gw:
        async with httpx.AsyncClient(timeout=20) as c:
            relayed = await c.post(
                f"{gw}/v1/chat/completions", json={**CHAT, "stream": True, "logprobs": True}
            )
            movable = await c.post(f"{gw}/v1/chat/completions", json={**CHAT, "stream": True})
    for r, half in ((relayed, True), (movable, False)):
        assert r.status_code == 200
        events = r.text.split("\n\n")
        assert events[-1] == "" and events[-2] == "data: [DONE]"
        error = json.loads(events[-3].removeprefix("data: "))
        assert_error_shape(error)
        assert error["error"]["type"] == "upstream_error"
        assert len(events) == 5 + half
        assert not half or (events[2].startswith('data: {"id"') and "error" not in events[2])


async def test_stream_stalled_mid_way_ends_with_error_event_and_no_ejection(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    settings = {"chunk_timeout_s": 0.3, "health_interval_s": 60}
    async with gateway(tmp_path, redis_url, [engines["stall"].url], **settings) as gw:
        async with httpx.AsyncClient(timeout=20) as c:
            r = await c.post(f"{gw}/v1/chat/completions", json={**CHAT, "stream": True})
            metrics = (await c.get(f"{gw}/metrics")).text
    events = r.text.split("\n\n")
    assert events[-2] == "data: [DONE]"
    assert json.loads(events[-3].removeprefix("data: "))["error"]["code"] == "upstream_timeout"
    assert "llmgw_ejections_total{" not in metrics


async def test_client_4xx_from_replica_passes_through_and_never_ejects(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    async with gateway(tmp_path, redis_url, [engines["err400"].url]) as gw:
        async with httpx.AsyncClient(timeout=20) as c:
            for _ in range(5):
                r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
                assert r.status_code == 400
                assert r.json()["error"]["message"] == "fake client error"
            metrics = (await c.get(f"{gw}/metrics")).text
            assert (await c.get(f"{gw}/ready")).json()["models"]["m"]["ready_replicas"] == 1
    assert "llmgw_ejections_total{" not in metrics


async def test_ejected_replica_comes_back_after_half_open_probe(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    # "err500" answers /health but every completion with a 500: ejected by its second 500 in a row
    # (LLMGW_EJECT_AFTER=2), then the half-open /health probe brings it back after the back-off.
    async with gateway(
        tmp_path,
        redis_url,
        [engines["err500"].url],
        eject_base_s=0.5,
        retry_attempts=1,
        eject_after=2,
    ) as gw:
        async with httpx.AsyncClient(timeout=20) as c:
            r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
            assert r.status_code == 500 and r.json()["error"]["code"] == "replica_error"
            assert (await c.get(f"{gw}/ready")).json()["models"]["m"]["ready_replicas"] == 1
            r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
            assert r.status_code == 500
            assert (await c.get(f"{gw}/ready")).json()["models"]["m"]["ready_replicas"] == 0

            async def back() -> bool:
                return bool((await c.get(f"{gw}/ready")).json()["models"]["m"]["ready_replicas"] == 1)

            await until(back, 5.0, "the replica back")


async def test_hop_by_hop_and_api_key_headers_are_not_forwarded(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = {**CHAT, "tools": tools, "tool_choice": "auto"}
    raw = json.dumps(body, separators=(",", ":")).encode()
    headers = {
        "authorization": "Bearer sk-secret",
        "connection": "keep-alive, x-foo",
        "x-foo": "1",
        "te": "trailers",
        "proxy-authorization": "x",
        "content-type": "application/json",
    }
    async with gateway(tmp_path, redis_url, [engines["good"].url]) as gw:
        async with httpx.AsyncClient(timeout=20) as c:
            r = await c.post(f"{gw}/v1/chat/completions", content=raw, headers=headers)
            assert r.status_code == 200
            stats = (await c.get(f"{engines['good'].url}/stats")).json()
    sent = stats["last_headers"]
    assert not {"authorization", "x-foo", "te", "proxy-authorization"} & set(sent)
    assert sent["x-request-id"] == r.headers["x-request-id"]
    assert stats["last_body"].encode() == raw


async def started(c: httpx.AsyncClient, *engines: Proc) -> int:
    """Generations the fake engines started (counted as each request arrived)."""
    return sum([(await c.get(f"{e.url}/stats")).json()["started"] for e in engines])


async def reset(c: httpx.AsyncClient, *engines: Proc) -> None:
    for e in engines:
        await c.get(f"{e.url}/stats/reset")


async def test_long_non_streamed_request_times_out_once_without_ejection(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    # Both replicas take 1.5 s to answer; the first-byte timeout (0.2 s) is not a non-streamed request's
    # limit, the total deadline (0.5 s) is: one generation, a 504, and neither replica ejected.
    slow = [engines["slow"], engines["slow2"]]
    settings = {"first_byte_timeout_s": 0.2, "request_timeout_s": 0.5, "health_interval_s": 60}
    async with gateway(tmp_path, redis_url, [e.url for e in slow], **settings) as gw:
        async with httpx.AsyncClient(timeout=20) as c:
            await reset(c, *slow)
            r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
            assert r.status_code == 504, r.text
            assert_error_shape(r.json())
            assert r.json()["error"]["code"] == "upstream_timeout"
            assert await started(c, *slow) == 1
            metrics = (await c.get(f"{gw}/metrics")).text
            assert (await c.get(f"{gw}/ready")).json()["models"]["m"]["ready_replicas"] == 2
    assert "llmgw_ejections_total{" not in metrics
    assert 'llmgw_retries_total{model="m"} 1.0' not in metrics


async def test_non_streamed_request_within_its_deadline_outlives_the_first_byte_timeout(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    settings = {"first_byte_timeout_s": 0.2, "request_timeout_s": 10, "health_interval_s": 60}
    async with gateway(tmp_path, redis_url, [engines["slow"].url], **settings) as gw:
        async with httpx.AsyncClient(timeout=20) as c:
            await reset(c, engines["slow"])
            r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
            assert r.status_code == 200, r.text
            assert await started(c, engines["slow"]) == 1


async def test_stream_first_byte_timeout_is_not_retried_nor_ejected(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    hung = [engines["hang"], engines["hang2"]]
    settings = {"first_byte_timeout_s": 0.3, "health_interval_s": 60}
    async with gateway(tmp_path, redis_url, [e.url for e in hung], **settings) as gw:
        async with httpx.AsyncClient(timeout=20) as c:
            await reset(c, *hung)
            r = await c.post(f"{gw}/v1/chat/completions", json={**CHAT, "stream": True})
            assert r.status_code == 504 and r.json()["error"]["code"] == "upstream_timeout"
            assert await started(c, *hung) == 1
            metrics = (await c.get(f"{gw}/metrics")).text
    assert "llmgw_ejections_total{" not in metrics


async def test_a_500_after_work_is_passed_through_once_without_ejection(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    """Defect 4: a replica that worked and answered 500 had the request run again elsewhere, and every
    replica a poisoned request visited was ejected. Now: one engine run, the 500 passed through in the
    API's shape, and no ejection (one failure is not a run of them)."""
    bad = [engines["slow500"], engines["slow500b"]]
    async with gateway(tmp_path, redis_url, [e.url for e in bad], health_interval_s=60) as gw:
        async with httpx.AsyncClient(timeout=20) as c:
            await reset(c, *bad)
            r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
            assert r.status_code == 500, r.text
            assert_error_shape(r.json())
            assert r.json()["error"]["code"] == "replica_error"
            assert "fake engine failure" in r.json()["error"]["message"]
            assert await started(c, *bad) == 1
            metrics = (await c.get(f"{gw}/metrics")).text
            assert (await c.get(f"{gw}/ready")).json()["models"]["m"]["ready_replicas"] == 2
    assert "llmgw_ejections_total{" not in metrics and "llmgw_retries_total{" not in metrics


async def test_retry_deadline_is_checked_before_the_first_retry(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    # Each replica refuses (503) after 0.6 s; with a 0.3 s retry deadline the first refusal leaves no
    # time to retry: one attempt, its 502.
    bad = [engines["slow503"], engines["slow503b"]]
    settings = {"retry_deadline_s": 0.3, "health_interval_s": 60}
    async with gateway(tmp_path, redis_url, [e.url for e in bad], **settings) as gw:
        async with httpx.AsyncClient(timeout=20) as c:
            await reset(c, *bad)
            r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
            assert r.status_code == 502, r.text
            assert_error_shape(r.json())
            assert await started(c, *bad) == 1


async def test_client_leaving_a_non_streamed_request_aborts_it_and_frees_its_slot(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    # One slot (concurrency 1) on a replica that never answers: a client that leaves must abort the
    # upstream request (the engine sees the connection close) and free the slot for the next request.
    hang = engines["hang"]
    prefix = f"d{uuid.uuid4().hex[:8]}"
    await register(redis_url, prefix, "m", hang.url, "m-0", concurrency=1)
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix, health_interval_s=60) as gw:
        async with httpx.AsyncClient(timeout=60) as c:

            async def stats() -> dict[str, int]:
                return dict((await c.get(f"{hang.url}/stats")).json())

            await reset(c, hang)
            first = asyncio.create_task(c.post(f"{gw}/v1/chat/completions", json=CHAT))
            await until(lambda: started_is(stats, 1), 10, "the first request reached the engine")
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
            await until(lambda: inflight_is(stats, 0), 10, "the engine saw the request aborted")
            second = asyncio.create_task(c.post(f"{gw}/v1/chat/completions", json=CHAT))
            await until(lambda: started_is(stats, 2), 10, "the second request was admitted")
            second.cancel()
            await asyncio.gather(second, return_exceptions=True)
            await until(lambda: inflight_is(stats, 0), 10, "the engine saw the second request aborted")
            metrics = (await c.get(f"{gw}/metrics")).text
    assert 'llmgw_requests_total{model="m",status="499"} 2.0' in metrics
    assert "llmgw_ejections_total{" not in metrics


async def started_is(stats: Callable[[], Awaitable[dict[str, int]]], n: int) -> bool:
    return (await stats())["started"] == n


async def inflight_is(stats: Callable[[], Awaitable[dict[str, int]]], n: int) -> bool:
    return (await stats())["inflight"] == n


async def test_every_replica_ejected_is_still_tried_and_an_answer_brings_it_back(
    tmp_path: Path, redis_url: str
) -> None:
    # Both replicas freeze past the health check's timeout (as a busy CPU host can make a live vLLM
    # miss it): both are ejected, with a back-off far longer than the test. Thawed, they serve: a
    # request is not refused with 503 no_ready_replica but tried on them, and its answer ends the
    # replica's ejection at once.
    engines = [start_fake_engine(tmp_path), start_fake_engine(tmp_path)]
    try:
        async with gateway(tmp_path, redis_url, [e.url for e in engines], eject_base_s=600) as gw:
            async with httpx.AsyncClient(timeout=20) as c:

                async def ready_is(n: int) -> bool:
                    return bool((await c.get(f"{gw}/ready")).json()["models"]["m"]["ready_replicas"] == n)

                for e in engines:
                    os.killpg(e.popen.pid, signal.SIGSTOP)
                await until(lambda: ready_is(0), 20)
                for e in engines:
                    os.killpg(e.popen.pid, signal.SIGCONT)
                r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
                assert r.status_code == 200, r.text
                assert await ready_is(1)
    finally:
        for e in engines:
            os.killpg(e.popen.pid, signal.SIGCONT)
            e.stop()


async def test_client_leaving_a_stream_aborts_it_and_frees_its_slot(tmp_path: Path, redis_url: str) -> None:
    # One slot on a replica that streams slowly (100 ms between events): a stream client that leaves
    # after its first event must end the upstream request (the engine sees it close) and free the
    # slot; the next stream is admitted and its own leaving ends it too.
    slow = start_fake_engine(tmp_path, "--delay-ms", "100")
    prefix = f"s{uuid.uuid4().hex[:8]}"
    body = {**CHAT, "max_tokens": 200, "stream": True}
    try:
        await register(redis_url, prefix, "m", slow.url, "m-0", concurrency=1)
        async with (
            serve_gateway(tmp_path, FLEET, redis_url, prefix, health_interval_s=60) as gw,
            httpx.AsyncClient(timeout=60) as c,
        ):

            async def stats() -> dict[str, int]:
                return dict((await c.get(f"{slow.url}/stats")).json())

            for n in (1, 2):
                async with httpx.AsyncClient(timeout=60) as leaving:
                    async with leaving.stream("POST", f"{gw}/v1/chat/completions", json=body) as r:
                        assert r.status_code == 200
                        first = await anext(r.aiter_bytes())
                        assert first.startswith(b"data: ")
                await until(lambda n=n: started_is(stats, n), 10, f"stream {n} reached the engine")
                await until(lambda: inflight_is(stats, 0), 10, f"the engine saw stream {n} end")
            metrics = (await c.get(f"{gw}/metrics")).text
    finally:
        slow.stop()
    assert 'llmgw_requests_total{model="m",status="200"} 2.0' in metrics
