"""Idempotency keys through two real gateways (one Redis) in front of one FAKE ENGINE, whose ``/stats``
counts the generations it began: a request sent again with its ``Idempotency-Key``, to either gateway,
runs no second generation. Sent once the first finished it gets the stored answer byte for byte; sent
while the first still runs (a slow stream) it waits for it and gets the same bytes; with another body it
is refused with a 422 in the API's own shape. A request without a key runs each time."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx

from testing.procs import Proc

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}
STREAM = {**CHAT, "stream": True}
MESSAGES = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}


async def began(c: httpx.AsyncClient, engine: Proc) -> int:
    stats = (await c.get(f"{engine.url}/stats")).json()
    return int(sum(stats["generations"].values()))


async def post(c: httpx.AsyncClient, url: str, body: dict[str, Any], key: str) -> httpx.Response:
    return await c.post(f"{url}/v1/chat/completions", json=body, headers={"idempotency-key": key})


async def test_a_finished_request_sent_again_to_another_gateway_gets_its_answer_again(
    gateways: list[str], engine: Proc, http: httpx.AsyncClient
) -> None:
    key, before = uuid.uuid4().hex, await began(http, engine)
    first = await post(http, gateways[0], CHAT, key)
    again = await post(http, gateways[1], CHAT, key)
    stream_key = uuid.uuid4().hex
    streamed = await post(http, gateways[0], STREAM, stream_key)
    streamed_again = await post(http, gateways[1], STREAM, stream_key)
    assert first.status_code == 200 and again.status_code == 200, again.text
    assert again.content == first.content and again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert streamed_again.content == streamed.content and b"data: [DONE]" in streamed.content
    assert await began(http, engine) - before == 2  # one generation per key
    metrics = (await http.get(f"{gateways[1]}/metrics")).text
    assert 'llmgw_idempotent_requests_total{outcome="replayed"} 2.0' in metrics
    # without a key each request runs; a key that is no key is refused
    plain = [await http.post(f"{gateways[0]}/v1/chat/completions", json=CHAT) for _ in range(2)]
    assert [p.status_code for p in plain] == [200, 200] and "idempotent-replayed" not in plain[1].headers
    assert await began(http, engine) - before == 4
    assert (await post(http, gateways[0], CHAT, "x" * 300)).status_code == 400


async def test_a_request_sent_again_while_its_first_streams_waits_for_it_and_runs_nothing(
    gateways: list[str], engine: Proc, http: httpx.AsyncClient
) -> None:
    key, before = uuid.uuid4().hex, await began(http, engine)
    first = asyncio.create_task(post(http, gateways[0], STREAM, key))
    await asyncio.sleep(0.05)  # the first is being admitted, routed or streamed (6 tokens, 60 ms each)
    second, third = await asyncio.gather(
        post(http, gateways[1], STREAM, key), post(http, gateways[0], STREAM, key)
    )
    done = await first
    assert done.status_code == 200 and b"data: [DONE]" in done.content
    assert second.content == done.content and third.content == done.content
    assert await began(http, engine) - before == 1


async def test_the_same_key_with_another_body_is_a_422_in_the_apis_shape(
    gateways: list[str], engine: Proc, http: httpx.AsyncClient
) -> None:
    refused = {}
    for path, body in (("/v1/chat/completions", CHAT), ("/v1/messages", MESSAGES)):
        key = uuid.uuid4().hex
        first = await http.post(f"{gateways[0]}{path}", json=body, headers={"idempotency-key": key})
        assert first.status_code == 200
        before = await began(http, engine)
        other = {**body, "max_tokens": 5}
        refused[path] = await http.post(f"{gateways[1]}{path}", json=other, headers={"idempotency-key": key})
        assert await began(http, engine) == before
    chat, messages = refused["/v1/chat/completions"], refused["/v1/messages"]
    assert chat.status_code == 422 and chat.headers["x-should-retry"] == "false"
    assert chat.json()["error"]["code"] == "idempotency_key_reused"
    assert "Idempotency-Key" in chat.json()["error"]["message"]
    assert messages.status_code == 422 and messages.json()["type"] == "error"
    assert messages.json()["error"]["type"] == "invalid_request_error"
    metrics = (await http.get(f"{gateways[1]}/metrics")).text
    assert 'llmgw_idempotent_requests_total{outcome="refused"} 2.0' in metrics
