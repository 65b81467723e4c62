"""What clients and operators read from the gateway, checked against the real stack's vLLM CPU replicas:

- /v1/models carries each model's max_model_len as its replicas' own /v1/models says it;
- a stream without include_usage shows the client no usage event, and the gateway's model and tenant
  token counters grow by what vLLM's own vllm:prompt_tokens_total and vllm:generation_tokens_total grew by;
- a client's traceparent reaches vLLM unchanged (its spans, exported to the loopback OTLP receiver, carry
  that trace and parent); a request without one gets a new trace id, written in the gateway's log line,
  that vLLM receives; with tracing on (the stack's gateways), the gateway's spans and vLLM's share it.

An extra gateway in this process (API keys on, tracing off) joins the stack's Redis and replicas.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord, read_registry
from llmgw_contract.vllm_metrics import gauge_sums
from llmgw_tools.stack.stack import Stack
from testing.gateway import serve_gateway
from testing.otlp import TraceReceiver
from testing.poll import until
from tests.e2e.conftest import TRACED_MODEL

pytestmark = pytest.mark.e2e
ADMIN = "edge-contract-admin-key-0123456789"
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACED_PARENT = "00-5c3e9a1f0b2d4e6f8a9b0c1d2e3f4a5b-1a2b3c4d5e6f7081-01"
GATEWAY_SERVICE = "llmgw-gateway"


async def ready_replicas(stack: Stack, model: str) -> list[ReplicaRecord]:
    r = aioredis.Redis.from_url(stack.config.redis_url)
    try:
        records = await read_registry(r, RedisKeys("llmgw"))
    finally:
        await r.aclose()
    return [rec for rec in records if rec.model == model and rec.routable]


@pytest.fixture(scope="module")
async def keyed_gateway(
    stack: Stack, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[str, str]]:
    """(url, API key) of a gateway with keys on and tracing off, beside the stack's two."""
    tmp = tmp_path_factory.mktemp("edge")
    c = stack.config
    settings: dict[str, Any] = {
        "auth": True,
        "admin_key": ADMIN,
        "keys_redis_url": c.keys_redis_url,
        "vllm_api_key": c.vllm_api_key,
    }
    async with serve_gateway(tmp, c.fleet_file.read_text(), c.redis_url, "llmgw", **settings) as url:
        async with httpx.AsyncClient(timeout=10) as http:
            admin = {"authorization": f"Bearer {ADMIN}"}
            created = await http.post(f"{url}/admin/keys", json={"tenant": "edge"}, headers=admin)
            assert created.status_code == 201, created.text
        yield url, created.json()["secret"]


async def test_models_carry_vllms_max_model_len(stack: Stack) -> None:
    """Each gateway reads the cards from the replicas in the background (gateway/replicas/model_cards.py):
    a gateway restarted by an earlier test fills them within a tick or two, so they are polled for, with
    a deadline, through nginx (which may answer from any gateway)."""
    nginx = stack.config.nginx_url
    async with httpx.AsyncClient(timeout=10) as http:
        auth = {"authorization": f"Bearer {stack.config.vllm_api_key}"}
        for model in stack.fleet.models:
            replica = (await ready_replicas(stack, model.name))[0]
            own = (await http.get(f"{replica.url}/v1/models", headers=auth)).json()["data"]
            vllm_len = next(e["max_model_len"] for e in own if e["id"] == model.name)
            for name in (model.name, *model.aliases):

                async def carried(name: str = name, vllm_len: int = vllm_len) -> bool:
                    listed = {e["id"]: e for e in (await http.get(f"{nginx}/v1/models")).json()["data"]}
                    one = (await http.get(f"{nginx}/v1/models/{name}")).json()
                    return bool(listed[name].get("max_model_len") == one.get("max_model_len") == vllm_len)

                await until(carried, 15, f"/v1/models carries {name}'s max_model_len {vllm_len}")


async def vllm_tokens(http: httpx.AsyncClient, replicas: list[ReplicaRecord]) -> tuple[float, float]:
    sums = [gauge_sums((await http.get(f"{r.url}/metrics")).content) for r in replicas]
    prompt = sum(s.get("vllm:prompt_tokens_total", 0.0) for s in sums)
    return prompt, sum(s.get("vllm:generation_tokens_total", 0.0) for s in sums)


def gateway_tokens(text: str) -> tuple[float, float, float, float]:
    """(model prompt, model completion, tenant prompt, tenant completion) for the chat model."""
    wanted = {
        f'llmgw_prompt_tokens_total{{model="{TRACED_MODEL}"}}': 0,
        f'llmgw_completion_tokens_total{{model="{TRACED_MODEL}"}}': 1,
        f'llmgw_tenant_tokens_total{{kind="prompt",model="{TRACED_MODEL}",tenant="edge"}}': 2,
        f'llmgw_tenant_tokens_total{{kind="completion",model="{TRACED_MODEL}",tenant="edge"}}': 3,
    }
    found = [0.0] * 4
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        if series in wanted:
            found[wanted[series]] = float(value)
    return found[0], found[1], found[2], found[3]


async def test_streams_without_include_usage_count_what_vllm_counted(
    stack: Stack, keyed_gateway: tuple[str, str]
) -> None:
    url, key = keyed_gateway
    replicas = await ready_replicas(stack, TRACED_MODEL)
    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=120) as http:
        vllm_before = await vllm_tokens(http, replicas)
        gw_before = gateway_tokens((await http.get(f"{url}/metrics")).text)
        events: list[str] = []
        for i in range(4):
            body = {
                "model": TRACED_MODEL,
                "messages": [{"role": "user", "content": f"Count to {i + 3}, then stop."}],
                "max_tokens": 12,
                "stream": True,
            }
            async with http.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as r:
                assert r.status_code == 200
                events += [line async for line in r.aiter_lines() if line.startswith("data: ")]
        gw_after = gateway_tokens((await http.get(f"{url}/metrics")).text)

        async def vllm_grew_as_counted() -> bool:
            after = await vllm_tokens(http, replicas)
            return (after[0] - vllm_before[0], after[1] - vllm_before[1]) == (
                gw_after[0] - gw_before[0],
                gw_after[1] - gw_before[1],
            )

        await until(vllm_grew_as_counted, 10, "vLLM's token counters to match the gateway's")
    assert events.count("data: [DONE]") == 4
    assert not any('"usage"' in e for e in events)  # the client sees no usage event it did not ask for
    grew = [a - b for a, b in zip(gw_after, gw_before, strict=True)]
    assert grew[0] > 0 and grew[1] > 0
    assert grew[2:] == grew[:2]  # the tenant's counters: the same engine counts


def vllm_spans(otlp: TraceReceiver, trace: str) -> list[Any]:
    return [s for s in otlp.of_trace(trace) if s.service != GATEWAY_SERVICE]


async def test_a_clients_traceparent_reaches_vllm_unchanged(
    otlp: TraceReceiver, keyed_gateway: tuple[str, str]
) -> None:
    url, key = keyed_gateway
    body = {"model": TRACED_MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
    headers = {"authorization": f"Bearer {key}", "traceparent": PARENT}
    async with httpx.AsyncClient(timeout=120) as http:
        assert (await http.post(f"{url}/v1/chat/completions", json=body, headers=headers)).status_code == 200
    spans = await until(lambda: vllm_spans(otlp, PARENT[3:35]), 30, "vLLM's span in the client's trace")
    assert isinstance(spans, list)
    assert {s.parent_id for s in spans} == {PARENT[36:52]}  # the client's own span: passed on unchanged


def logged_trace_id(logs: Path, request_id: str) -> str:
    for log in sorted(logs.glob("gateway-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if f"request_id={request_id} trace_id=" in line and "status=" in line:
                return line.split(" trace_id=", 1)[1].split(" ", 1)[0]
    return ""


async def test_with_tracing_on_the_gateways_and_vllms_spans_share_one_trace(
    stack: Stack, otlp: TraceReceiver
) -> None:
    """Through nginx to the stack's gateways (tracing on): without a traceparent the gateway starts a
    trace (its id in the gateway's log line) that vLLM joins; with one, both join the client's."""
    body = {"model": TRACED_MODEL, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3}
    async with httpx.AsyncClient(timeout=120) as http:
        url = f"{stack.config.nginx_url}/v1/chat/completions"
        r = await http.post(url, json=body, headers={"x-request-id": "edge-contract-new-trace"})
        assert r.status_code == 200
        given = await http.post(url, json=body, headers={"traceparent": TRACED_PARENT})
        assert given.status_code == 200
    new = await until(lambda: logged_trace_id(stack.logs, "edge-contract-new-trace"), 10, "the access line")
    assert isinstance(new, str) and len(new) == 32
    for trace in (new, TRACED_PARENT[3:35]):

        def both(trace: str = trace) -> bool:  # (spans are exported in batches, each as it ends)
            spans = otlp.of_trace(trace)
            names = {s.name for s in spans if s.service == GATEWAY_SERVICE}
            vllm = any(s.service != GATEWAY_SERVICE for s in spans)
            return vllm and {"llmgw.request", "authenticate", "queue_wait", "pick", "forward"} <= names

        await until(both, 30, f"the gateway's request spans and vLLM's in trace {trace}")
        spans = otlp.of_trace(trace)
        forwards = {s.span_id for s in spans if s.name in ("forward", "retry")}
        assert all(s.parent_id in forwards for s in spans if s.service != GATEWAY_SERVICE)
