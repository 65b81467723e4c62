"""Mid-stream migration on real vLLM CPU replicas (two SmolLM2, the shared e2e stack): a stream whose
replica freezes (SIGSTOP) mid-way continues on the other replica, and at temperature 0 its text is
byte-identical to an undisturbed run of the same request, for chat and for completions. The non-streamed
form, its replica frozen or killed -9 mid-generation, is answered whole: vLLM's own non-streamed answer."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

import httpx
import pytest

from bench.migration_check import group_of
from llmgw_contract.vllm_probe import requests_in_engine
from llmgw_tools.stack.stack import Stack

pytestmark = pytest.mark.e2e
MODEL = "smollm2-135m-instruct"
TOKENS = 48
CHAT: dict[str, Any] = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}],
}
COMPLETION: dict[str, Any] = {"model": MODEL, "prompt": "The history of the lighthouse begins"}
SAMPLING = {"max_tokens": TOKENS, "temperature": 0, "ignore_eos": True, "stream": True}


def text_of(raw: str) -> tuple[str, list[dict[str, Any]]]:
    events = [e.removeprefix("data: ") for e in raw.strip().split("\n\n")]
    assert events[-1] == "[DONE]", raw[-300:]
    frames = [json.loads(e) for e in events[:-1]]
    assert not [f for f in frames if "error" in f], raw[-300:]
    text = "".join(
        c.get("delta", {}).get("content") or c.get("text") or "" for f in frames for c in f["choices"]
    )
    return text, frames


async def busy_port(client: httpx.AsyncClient, ports: list[int]) -> int:
    """The replica running a generation now (nothing else runs during this test)."""
    for _ in range(50):
        for port in ports:
            if (await requests_in_engine(client, f"http://127.0.0.1:{port}") or 0) > 0:
                return port
        await asyncio.sleep(0.05)
    raise LookupError("no replica is running the stream")


async def frozen_mid_way(client: httpx.AsyncClient, stack: Stack, url: str, body: dict[str, Any]) -> str:
    """The stream, with the replica serving it frozen after a few tokens (thawed once it ended)."""
    base = stack.fleet.defaults.base_port
    group, raw = 0, b""
    try:
        async with client.stream("POST", url, json=body) as r:
            async for part in r.aiter_bytes():
                raw += part
                if not group and raw.count(b"\n\n") >= 8:
                    group = group_of(await busy_port(client, [base, base + 1]))
                    os.killpg(group, signal.SIGSTOP)
    finally:
        if group:
            os.killpg(group, signal.SIGCONT)
    return raw.decode()


@pytest.mark.parametrize(("path", "body"), [("chat/completions", CHAT), ("completions", COMPLETION)])
async def test_frozen_replica_stream_continues_byte_identical(
    stack: Stack, path: str, body: dict[str, Any]
) -> None:
    url = f"{stack.config.nginx_url}/v1/{path}"
    request = {**body, **SAMPLING, "stream_options": {"include_usage": True}}
    async with httpx.AsyncClient(timeout=httpx.Timeout(120.0)) as client:
        reference, _ = text_of((await client.post(url, json=request)).text)
        migrated, frames = text_of(await frozen_mid_way(client, stack, url, request))
        gateways = [f"http://127.0.0.1:{p}/metrics" for p in stack.config.gateway_ports]
        metrics = "".join([(await client.get(g)).text for g in gateways])
    assert migrated == reference
    assert len({f["id"] for f in frames}) == 1 and len({f["created"] for f in frames}) == 1
    usage = [f["usage"] for f in frames if f.get("usage")]
    assert len(usage) == 1 and usage[0]["completion_tokens"] == TOKENS
    assert f'llmgw_migrations_total{{model="{MODEL}",outcome="continued"}}' in metrics


async def continued(client: httpx.AsyncClient, stack: Stack) -> float:
    """The gateways' count of generations that moved and were answered."""
    line = f'llmgw_migrations_total{{model="{MODEL}",outcome="continued"}} '
    texts = [(await client.get(f"http://127.0.0.1:{p}/metrics")).text for p in stack.config.gateway_ports]
    return sum(float(x.split(line, 1)[1].split()[0]) for x in texts if line in x)


async def failed_while_generating(
    client: httpx.AsyncClient, stack: Stack, url: str, body: dict[str, Any], sig: signal.Signals
) -> str:
    """A non-streamed answer, with the replica generating it frozen (SIGSTOP: no token within the
    gateways' LLMGW_MIGRATION_STALL_S) or killed -9 once it has run a while: the generation continues on
    the other replica after the tokens it had."""
    base = stack.fleet.defaults.base_port
    task = asyncio.create_task(client.post(url, json=body))
    port = await busy_port(client, [base, base + 1])
    group = group_of(port)
    await asyncio.sleep(0.5)  # tokens generated there: the continuation starts after them
    os.killpg(group, sig)
    try:
        r = await task
    finally:
        if sig == signal.SIGSTOP:
            os.killpg(group, signal.SIGCONT)
        else:
            await back(client, port)
    assert r.status_code == 200, r.text
    return r.text


async def back(client: httpx.AsyncClient, port: int) -> None:
    """The killed replica, started again by the supervisor, answers /health (the tests after this one
    find both replicas)."""
    for _ in range(600):
        try:
            if (await client.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(1)
    raise TimeoutError(f"the replica on port {port} did not come back")


def same_but_identity(answer: dict[str, Any], reference: dict[str, Any]) -> None:
    """The whole answer is vLLM's own non-streamed answer: every key in order, every value, but the id
    and created (each request has its own)."""
    assert list(answer) == list(reference)
    assert answer["id"] != reference["id"] and answer["id"].startswith(reference["id"].split("-")[0])
    for key in ("id", "created"):
        answer, reference = {**answer, key: None}, {**reference, key: None}
    assert json.dumps(answer) == json.dumps(reference)


FAULTS = [
    ("chat/completions", CHAT, signal.SIGSTOP),
    ("completions", COMPLETION, signal.SIGSTOP),
    ("chat/completions", CHAT, signal.SIGKILL),
]


@pytest.mark.parametrize(
    ("path", "body", "sig"), FAULTS, ids=["chat-frozen", "completions-frozen", "chat-killed"]
)
async def test_failed_replica_non_streamed_answer_is_vllms_own(
    stack: Stack, path: str, body: dict[str, Any], sig: signal.Signals
) -> None:
    """The non-streamed form: sent upstream as a stream, continued token-exact after the failure, and
    answered whole: byte-identical to vLLM's own undisturbed non-streamed answer (id and created apart)."""
    request = {**body, **SAMPLING, "stream": False}
    replica = f"http://127.0.0.1:{stack.fleet.defaults.base_port + 1}/v1/{path}"
    async with httpx.AsyncClient(timeout=httpx.Timeout(120.0)) as client:
        key = stack.config.vllm_api_key  # the replicas take the workers' key (the shared e2e stack sets one)
        auth = {"authorization": f"Bearer {key}"} if key else {}
        reference = (await client.post(replica, json=request, headers=auth)).json()  # vLLM's own answer
        before = await continued(client, stack)
        raw = await failed_while_generating(
            client, stack, f"{stack.config.nginx_url}/v1/{path}", request, sig
        )
        assert await continued(client, stack) == before + 1  # continued on the other replica
    same_but_identity(json.loads(raw), reference)
