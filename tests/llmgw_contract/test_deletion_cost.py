"""A model pod's deletion cost follows its load: the PATCH the registration sidecar sends, received by a
loopback HTTP server standing in for the Kubernetes API server (real HTTP), and nothing outside a pod."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from llmgw_contract.deletion_cost import ANNOTATION, DeletionCost
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryTiming, RegistryWriter, ReplicaRecord
from llmgw_contract.replica_metrics import SupervisorMetrics
from llmgw_contract.sidecar import Options, Sidecar, Watched
from testing.poll import until
from testing.procs import Proc, start_fake_engine


@dataclass
class ApiServer:
    """Records each request: (method, path, headers, body); answers ``status``."""

    url: str = ""
    status: int = 200
    seen: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        method, path, _ = head[0].split(" ")
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:] if h)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.seen.append((method, path, headers, body))
        writer.write(
            f"HTTP/1.1 {self.status} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}".encode()
        )
        await writer.drain()
        writer.close()


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    server_state = ApiServer()
    server = await asyncio.start_server(server_state.handle, "127.0.0.1", 0)
    server_state.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        yield server_state


def cost_for(api: ApiServer, tmp: Path) -> DeletionCost:
    (tmp / "token").write_text("tok-1\n")
    return DeletionCost(api.url, "llmgw", "vllm-m-abc", tmp / "token")


async def test_the_patch_sets_the_annotation_with_the_service_account_token(
    api: ApiServer, tmp_path: Path
) -> None:
    cost = cost_for(api, tmp_path)
    assert await cost.follow(3) is True
    [(method, path, headers, body)] = api.seen
    assert (method, path) == ("PATCH", "/api/v1/namespaces/llmgw/pods/vllm-m-abc")
    assert headers["authorization"] == "Bearer tok-1"
    assert headers["content-type"] == "application/merge-patch+json"
    assert json.loads(body) == {"metadata": {"annotations": {ANNOTATION: "3"}}}
    assert await cost.follow(3) is False  # unchanged: no request
    (tmp_path / "token").write_text("tok-2")  # a rotated token is read again
    assert await cost.follow(0) is True
    assert len(api.seen) == 2 and api.seen[1][2]["authorization"] == "Bearer tok-2"


async def test_a_refused_patch_is_retried_until_it_succeeds(api: ApiServer, tmp_path: Path) -> None:
    cost = cost_for(api, tmp_path)
    api.status = 403
    assert await cost.follow(1) is False and cost.failing
    assert await cost.follow(1) is False  # the same cost is sent again: it never landed
    api.status = 200
    assert await cost.follow(1) is True and not cost.failing
    assert len(api.seen) == 3


def test_outside_a_pod_nothing_is_patched(tmp_path: Path) -> None:
    assert DeletionCost.from_env({}, tmp_path) is None
    assert DeletionCost.from_env({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, tmp_path) is None  # no POD_NAME
    (tmp_path / "namespace").write_text("llmgw\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "6443", "POD_NAME": "p"}
    cost = DeletionCost.from_env(env, tmp_path)
    assert cost is not None
    assert cost.url == "https://10.0.0.1:6443/api/v1/namespaces/llmgw/pods/p"
    assert cost.token_file == tmp_path / "token"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path, "--model", "m", "--latency-ms", "1500")
    yield proc
    proc.stop()


async def test_the_sidecar_keeps_the_cost_at_its_servers_load(
    api: ApiServer, tmp_path: Path, engine: Proc, redis_url: str
) -> None:
    redis = aioredis.Redis.from_url(redis_url)
    record = ReplicaRecord(id="m-pod-1", model="m", url=engine.url, concurrency=4, device="gpu:0")
    async with httpx.AsyncClient(timeout=10) as client:
        sidecar = Sidecar(
            [Watched(record)],
            RegistryWriter(redis, RedisKeys("dc"), RegistryTiming()),
            client,
            SupervisorMetrics(),
            Options(),
        )
        sidecar.deletion_cost = cost = cost_for(api, tmp_path)
        await sidecar.follow_load(cost)
        assert cost.sent == 0
        body = {"model": "m", "prompt": "hi", "max_tokens": 1}
        running = asyncio.create_task(client.post(f"{engine.url}/v1/completions", json=body))

        async def busy() -> bool:
            await sidecar.follow_load(cost)
            return cost.sent == 1

        await until(busy, deadline_s=5)
        assert (await running).status_code == 200
        await sidecar.follow_load(cost)
        assert cost.sent == 0
    await redis.aclose()
    assert [json.loads(b)["metadata"]["annotations"][ANNOTATION] for *_, b in api.seen] == ["0", "1", "0"]
