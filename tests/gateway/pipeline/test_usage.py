"""Exact usage for streams: the gateway asks for the usage event and, when the client did not, takes it
out of the client's stream (pure parts, then a gateway in front of a FAKE ENGINE replica; against real
vLLM: tests/e2e/test_edge_contract_live.py)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import orjson

from gateway.pipeline.body import write_body
from gateway.pipeline.usage import UsageStrip, asks_usage, without_usage_events
from gateway.values import RequestContext
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import start_fake_engine

USAGE = b'data: {"id":"a","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
DELTA = b'data: {"id":"a","choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
DONE = b"data: [DONE]\n\n"


def test_the_usage_option_is_added_only_where_the_client_did_not_ask() -> None:
    def sent(body: bytes) -> tuple[bytes, bool]:
        """The body sent upstream (gateway/pipeline/body.py) and whether the usage is the gateway's."""
        c = RequestContext("r", "chat/completions", body, {}, 0.0)
        c.payload = orjson.loads(body)
        c.strip_usage = asks_usage(c.payload)
        write_body(c)
        return c.body, c.strip_usage

    def asked(body: bytes) -> tuple[dict[str, object], bool]:
        new, strip = sent(body)
        return orjson.loads(new), strip

    assert asked(b'{"model":"m","stream":true}') == (
        {"stream_options": {"include_usage": True}, "model": "m", "stream": True},
        True,
    )
    opts = b'{"model":"m","stream_options":{"continuous_usage_stats":false}}'
    assert asked(opts)[0]["stream_options"] == {"continuous_usage_stats": False, "include_usage": True}
    assert asked(b'{"model":"m","stream_options":null}') == (
        {"model": "m", "stream_options": {"include_usage": True}},
        True,
    )
    own = b'{"model":"m","stream_options":{"include_usage":true}}'
    assert sent(own) == (own, False)  # the client's: passed on, untouched


def test_strip_takes_out_the_usage_event_whatever_the_chunking() -> None:
    stream = DELTA + DELTA + USAGE + DONE
    for cut in range(1, len(stream)):
        strip = UsageStrip()
        out = strip.feed(stream[:cut]) + strip.feed(stream[cut:]) + strip.rest()
        assert out == DELTA + DELTA + DONE, cut
    strip = UsageStrip()
    assert strip.feed(DELTA[:10]) == b"" and strip.rest() == DELTA[:10]  # a broken stream keeps its bytes
    crlf = stream.replace(b"\n\n", b"\r\n\r\n")  # a server that ends events with CRLF pairs
    strip = UsageStrip()
    out = strip.feed(crlf[:40]) + strip.feed(crlf[40:]) + strip.rest()
    assert out == (DELTA + DELTA + DONE).replace(b"\n\n", b"\r\n\r\n")


def test_a_block_read_at_once_loses_only_its_usage_events() -> None:
    chat = b'data: {"id":"a","choices":[{"index":0,"delta":{"content":"\\"usage\\": {}"}}]}\n\n'
    named = b'data: {"id":"a","choices":[{"index":0,"text":"x"}],"usage":null}\n\n'  # not the usage event
    block = DELTA * 40 + chat + named + DELTA + USAGE + DONE
    assert without_usage_events(block) == DELTA * 40 + chat + named + DELTA + DONE
    assert without_usage_events(USAGE) == b"" and without_usage_events(USAGE + USAGE + DONE) == DONE
    for end in (b"\r\n\r\n", b"\r\n\n", b"\n\r\n"):  # every blank line SSE allows
        assert without_usage_events(block.replace(b"\n\n", end)) == (
            DELTA * 40 + chat + named + DELTA + DONE
        ).replace(b"\n\n", end)
    assert UsageStrip().feed(block) == DELTA * 40 + chat + named + DELTA + DONE  # a whole answer, one read


async def stream_lines(c: httpx.AsyncClient, url: str, body: dict[str, object]) -> list[str]:
    async with c.stream("POST", url, json=body) as r:
        assert r.status_code == 200
        return [line async for line in r.aiter_lines() if line.startswith("data: ")]


def counter(metrics: str, name: str) -> float:
    return sum(float(ln.split()[-1]) for ln in metrics.splitlines() if ln.startswith(name + "{"))


async def test_a_stream_without_include_usage_is_counted_exactly_and_shows_no_usage(
    tmp_path: Path, redis_url: str
) -> None:
    engine = start_fake_engine(tmp_path)
    prefix = f"us{uuid.uuid4().hex[:8]}"
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi " * 200}],
        "max_tokens": 5,
        "stream": True,
    }
    try:
        await register(redis_url, prefix, "m", engine.url, "m-0")
        async with (
            serve_gateway(
                tmp_path, fleet_yaml([{"name": "m", "source": {"path": "/x"}}]), redis_url, prefix
            ) as gw,
            httpx.AsyncClient(timeout=10) as c,
        ):
            direct = await stream_lines(c, f"{engine.url}/v1/chat/completions", chat)
            plain = await stream_lines(c, f"{gw}/v1/chat/completions", chat)
            metrics = (await c.get(f"{gw}/metrics")).text
            asked = await stream_lines(
                c, f"{gw}/v1/chat/completions", {**chat, "stream_options": {"include_usage": True}}
            )
            sent = (await c.get(f"{engine.url}/stats")).json()["last_body"]
    finally:
        engine.stop()
    assert len(plain) == len(direct) == 6 and not any('"usage"' in line for line in plain)
    deltas = [[c["delta"] for c in json.loads(x[6:])["choices"]] for x in plain[:-1]]
    assert deltas == [[c["delta"] for c in json.loads(x[6:])["choices"]] for x in direct[:-1]]
    # the engine's own counts (8 prompt tokens), not the estimate from the body's 600-odd bytes
    assert counter(metrics, "llmgw_prompt_tokens_total") == 8
    assert counter(metrics, "llmgw_completion_tokens_total") == 5
    assert json.loads(asked[-2][6:])["usage"]["completion_tokens"] == 5  # asked for: passed on
    assert json.loads(sent)["stream_options"] == {"include_usage": True}
