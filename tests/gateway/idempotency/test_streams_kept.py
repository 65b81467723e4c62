"""Keyed streams survive their client (two real gateways, one FAKE ENGINE: conftest.py). Each event of a
keyed stream carries an ``id:``; a client cut mid-stream that comes back to the other gateway with its
key and ``Last-Event-ID`` gets the events after that id, live to the end, byte for byte what the whole
stream holds, and the engine ran one generation. A stream whose client left and that nobody claims is
cancelled at the end of its model's grace period (at once with none), and its key freed."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from typing import Any

import httpx

from testing.poll import until
from testing.procs import Proc

STREAM = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "stream": True}


async def stats(c: httpx.AsyncClient, engine: Proc) -> dict[str, Any]:
    return dict((await c.get(f"{engine.url}/stats")).json())


async def cut_after(c: httpx.AsyncClient, url: str, body: dict[str, Any], key: str, events: int) -> bytes:
    """The first ``events`` events of a keyed stream; then the client goes away."""
    got = b""
    async with c.stream(
        "POST", f"{url}/v1/chat/completions", json=body, headers={"idempotency-key": key}
    ) as r:
        async for chunk in r.aiter_bytes():
            got += chunk
            if got.count(b"\n\n") >= events:
                break
    return got


async def test_a_keyed_stream_numbers_every_event_and_a_plain_one_is_relayed_as_it_came(
    gateways: list[str], http: httpx.AsyncClient
) -> None:
    keyed = await http.post(
        f"{gateways[0]}/v1/chat/completions", json=STREAM, headers={"idempotency-key": "k1"}
    )
    plain = await http.post(f"{gateways[0]}/v1/chat/completions", json=STREAM)
    events = [e for e in keyed.content.split(b"\n\n") if e]
    assert [e.split(b"\n", 1)[0] for e in events] == [b"id: %d" % n for n in range(1, len(events) + 1)]
    assert events[-1].endswith(b"data: [DONE]") and b"id:" not in plain.content


async def test_a_client_cut_mid_stream_resumes_on_the_other_gateway_byte_identical(
    gateways: list[str], engine: Proc, http: httpx.AsyncClient
) -> None:
    key, before = uuid.uuid4().hex, (await stats(http, engine))["started"]
    head = await cut_after(http, gateways[0], STREAM, key, 2)
    last = head.split(b"\n\n")[1].split(b"\n", 1)[0].removeprefix(b"id: ")
    rest = await http.post(
        f"{gateways[1]}/v1/chat/completions",
        json=STREAM,
        headers={"idempotency-key": key, "last-event-id": last.decode()},
    )
    whole = await http.post(
        f"{gateways[0]}/v1/chat/completions", json=STREAM, headers={"idempotency-key": key}
    )
    assert last == b"2" and rest.status_code == 200 and rest.headers["idempotent-replayed"] == "true"
    assert head.count(b"\n\n") == 2 and head + rest.content == whole.content
    assert whole.content.endswith(b"data: [DONE]\n\n")
    assert (await stats(http, engine))["started"] - before == 1
    metrics = (await http.get(f"{gateways[1]}/metrics")).text
    assert 'llmgw_idempotent_requests_total{outcome="resumed"} 1.0' in metrics


async def test_a_stream_nobody_claims_is_cancelled_after_its_grace_and_its_key_freed(
    gateways: list[str], engine: Proc, http: httpx.AsyncClient
) -> None:
    long = {**STREAM, "model": "g", "max_tokens": 80}  # 4.8 s; its grace: 0.3 s
    await until(lambda: idle(http, engine), 3.0, "the engine idle")
    key, before, began = uuid.uuid4().hex, await stats(http, engine), time.monotonic()
    await cut_after(http, gateways[0], long, key, 1)

    async def expired() -> bool:
        text = (await http.get(f"{gateways[0]}/metrics")).text
        return 'llmgw_idempotent_requests_total{outcome="grace_expired"} 1.0' in text

    await until(expired, 3.0, "the grace period ended")
    await until(lambda: idle(http, engine), 3.0, "the engine's generation aborted")
    assert time.monotonic() - began < 4.0  # aborted: its 80 tokens take 4.8 s
    assert (await stats(http, engine))["started"] - before["started"] == 1
    again = await cut_after(http, gateways[1], long, key, 1)  # the key is free: this one runs
    assert (await stats(http, engine))["started"] - before["started"] == 2 and b"id: 1\n" in again
    await until(lambda: idle(http, engine), 3.0, "the second generation aborted after its grace")


async def test_with_no_grace_period_a_keyed_stream_is_cancelled_when_its_client_leaves(
    gateways: list[str], engine: Proc, http: httpx.AsyncClient
) -> None:
    long = {**STREAM, "model": "z", "max_tokens": 80}  # 4.8 s
    await until(lambda: idle(http, engine), 3.0, "the engine idle")
    key, began = uuid.uuid4().hex, time.monotonic()
    await cut_after(http, gateways[0], long, key, 1)
    await until(lambda: idle(http, engine), 3.0, "the engine's generation aborted")
    assert time.monotonic() - began < 4.0  # aborted: its 80 tokens take 4.8 s
    again = await cut_after(http, gateways[1], long, key, 1)  # its key was freed at once
    assert b"id: 1\n" in again
    await until(lambda: idle(http, engine), 3.0, "the second generation aborted")


async def idle(c: httpx.AsyncClient, engine: Proc) -> bool:
    return int((await stats(c, engine))["inflight"]) == 0


async def test_a_keyed_stream_left_before_its_first_byte_runs_on_for_its_grace_then_is_cancelled(
    gateways: list[str], engine: Proc, http: httpx.AsyncClient
) -> None:
    long = {**STREAM, "model": "g", "max_tokens": 80}  # first byte 0.4 s late, then 4.8 s; grace 0.3 s
    await until(lambda: idle(http, engine), 3.0, "the engine idle")
    before, expired_before = await stats(http, engine), await grace_expired(http, gateways[1])
    await http.get(f"{engine.url}/fault/latency?ms=400")
    try:
        held = asyncio.create_task(http.post(f"{gateways[1]}/v1/chat/completions", json=long,
                                             headers={"idempotency-key": uuid.uuid4().hex}))  # fmt: skip
        await until(lambda: busy(http, engine), 3.0, "the engine has it", interval_s=0.005)
        held.cancel()  # the client leaves before any byte came: not cancelled with it, kept for its grace
        began = time.monotonic()
        await until(lambda: idle(http, engine), 4.0, "the engine's generation aborted after its grace")
    finally:
        await http.get(f"{engine.url}/fault/latency?ms=0")
    assert 0.3 <= time.monotonic() - began < 3.0  # its grace, well before its 4.8 s of tokens
    assert (await stats(http, engine))["started"] - before["started"] == 1
    assert await grace_expired(http, gateways[1]) == expired_before + 1


async def busy(c: httpx.AsyncClient, engine: Proc) -> bool:
    return int((await stats(c, engine))["inflight"]) > 0


async def grace_expired(c: httpx.AsyncClient, gateway: str) -> float:
    text = (await c.get(f"{gateway}/metrics")).text
    found = re.search(r'^llmgw_idempotent_requests_total\{outcome="grace_expired"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0
