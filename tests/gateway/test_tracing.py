"""Trace context end to end with FAKE ENGINE replicas: the client's traceparent (and tracestate) reach
the replica unchanged; with tracing off a request without one (or with an invalid one) sends none; with
tracing on, such a request starts a new trace that the replica receives, and the gateway's spans
(authenticate, queue_wait, pick, forward, retry) land in the client's trace at a loopback OTLP receiver.
Against real vLLM: tests/e2e/test_edge_contract_live.py."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import httpx

from gateway.tracing import TRACE_ID, TraceIdFilter, traceparent_of
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.otlp import trace_receiver
from testing.poll import until
from testing.procs import start_fake_engine

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
FLEET = fleet_yaml([{"name": "m", "source": {"path": "/x"}, "policy": "round_robin"}])


async def last_headers(c: httpx.AsyncClient, url: str) -> dict[str, str]:
    headers: dict[str, str] = (await c.get(f"{url}/stats")).json()["last_headers"]
    return headers


async def test_trace_context_reaches_the_replica_with_tracing_off(tmp_path: Path, redis_url: str) -> None:
    engine = start_fake_engine(tmp_path)
    prefix = f"tr{uuid.uuid4().hex[:8]}"
    try:
        await register(redis_url, prefix, "m", engine.url, "m-0")
        async with (
            serve_gateway(tmp_path, FLEET, redis_url, prefix) as gw,
            httpx.AsyncClient(timeout=10) as c,
        ):
            given = {"traceparent": PARENT, "tracestate": "vendor=abc"}
            assert (await c.post(f"{gw}/v1/chat/completions", json=CHAT, headers=given)).status_code == 200
            passed = await last_headers(c, engine.url)
            assert (await c.post(f"{gw}/v1/chat/completions", json=CHAT)).status_code == 200
            without = await last_headers(c, engine.url)
            invalid = {"traceparent": "00-" + "0" * 32 + "-00f067aa0ba902b7-01", "tracestate": "v=1"}
            assert (await c.post(f"{gw}/v1/chat/completions", json=CHAT, headers=invalid)).status_code == 200
            bad = await last_headers(c, engine.url)
    finally:
        engine.stop()
    assert passed["traceparent"] == PARENT and passed["tracestate"] == "vendor=abc"  # unchanged
    assert "traceparent" not in without and "tracestate" not in without  # none made with tracing off
    assert "traceparent" not in bad and "tracestate" not in bad  # an invalid one is not passed on


async def test_with_tracing_on_the_gateways_spans_join_the_clients_trace(
    tmp_path: Path, redis_url: str
) -> None:
    engine, failing = start_fake_engine(tmp_path), start_fake_engine(tmp_path, "--fault", "503")
    prefix = f"tr{uuid.uuid4().hex[:8]}"
    try:
        await register(redis_url, prefix, "m", engine.url, "m-0")
        await register(redis_url, prefix, "m", failing.url, "m-1")  # refuses with 503: a retry
        with trace_receiver() as receiver:
            settings = {"tracing": True, "otlp_traces_endpoint": receiver.endpoint, "health_interval_s": 60.0}
            async with (
                serve_gateway(tmp_path, FLEET, redis_url, prefix, **settings) as gw,
                httpx.AsyncClient(timeout=10) as c,
            ):
                sent = []
                for _ in range(2):
                    r = await c.post(f"{gw}/v1/chat/completions", json=CHAT, headers={"traceparent": PARENT})
                    assert r.status_code == 200
                    sent.append((await last_headers(c, engine.url))["traceparent"])
                assert (await c.post(f"{gw}/v1/chat/completions", json=CHAT)).status_code == 200
                made = (await last_headers(c, engine.url))["traceparent"]  # a trace of its own
            # the lifespan's end flushed the batch
            spans = await until(lambda: receiver.of_trace(PARENT[3:35]), 10, "the gateway's spans")
    finally:
        engine.stop()
        failing.stop()
    assert isinstance(spans, list)
    names = [s.name for s in spans]
    assert names.count("llmgw.request") == 2
    assert {"authenticate", "queue_wait", "pick", "forward", "retry"} <= set(names)
    roots = [s for s in spans if s.name == "llmgw.request"]
    assert {s.parent_id for s in roots} == {PARENT[36:52]}  # children of the client's span
    forwards = {s.span_id for s in spans if s.name in ("forward", "retry")}
    assert all(tp[3:35] == PARENT[3:35] and tp[36:52] in forwards for tp in sent)  # the replica's parent
    assert traceparent_of(made) == made and made[3:35] != PARENT[3:35]  # valid, new
    own = await until(lambda: receiver.of_trace(made[3:35]), 10, "the new trace's spans")
    assert isinstance(own, list) and "llmgw.request" in {s.name for s in own}


def test_a_requests_log_lines_carry_its_trace_id_beside_its_request_id() -> None:
    record = logging.LogRecord(
        "llmgw.proxy", logging.INFO, "", 0, "request_id=%s model=%s x", ("r1", "m"), None
    )
    token = TRACE_ID.set("abc")
    try:
        assert TraceIdFilter().filter(record)
    finally:
        TRACE_ID.reset(token)
    assert record.getMessage() == "request_id=r1 trace_id=abc model=m x"
    other = logging.LogRecord("llmgw.app", logging.INFO, "", 0, "gateway up", (), None)
    assert TraceIdFilter().filter(other) and other.getMessage() == "gateway up"  # no request: unchanged
