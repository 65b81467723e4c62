"""At most one generation per request (docs/decisions/0006-generation-never-twice.md), through a real
gateway in front of two FAKE ENGINE replicas that crash on one given prompt (``--crash-on``: the request
is read, counted as a generation by its request id, and its connection closed with no answer).

A request whose connection broke after it was written is never sent again, neither to the same replica
(on a fresh connection) nor to the other, with migration off and with it on (nothing was generated that
a token-exact continuation could start from; one that cannot move is not run again whole): the engines
count exactly one generation for it across both, and the client gets a clear 502 in its API's shape with
``x-should-retry: false``. The one replica that failed may be ejected; the other still serves the
model's next request."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import Proc, start_fake_engine

CRASH = "this prompt crashes the engine"
FLEET = fleet_yaml(
    [
        {"name": "m", "source": {"path": "/x"}, "policy": "round_robin", "migration": False},
        {"name": "e", "source": {"path": "/x"}, "policy": "round_robin", "engine": {"runner": "pooling"}},
        {"name": "mig", "source": {"path": "/x"}, "policy": "round_robin"},  # migration on (the default)
    ]
)
USER = [{"role": "user", "content": CRASH}]
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"model": "m", "messages": USER, "max_tokens": 4}),
    "chat-stream": (
        "/v1/chat/completions",
        {"model": "m", "messages": USER, "max_tokens": 4, "stream": True},
    ),
    "completions": ("/v1/completions", {"model": "m", "prompt": CRASH, "max_tokens": 4}),
    "embeddings": ("/v1/embeddings", {"model": "e", "input": CRASH}),
    "rerank": ("/v1/rerank", {"model": "e", "query": CRASH, "documents": ["a", "b"]}),
    "messages": ("/v1/messages", {"model": "m", "messages": USER, "max_tokens": 4}),
    "messages-stream": ("/v1/messages", {"model": "m", "messages": USER, "max_tokens": 4, "stream": True}),
    "responses": ("/v1/responses", {"model": "m", "input": CRASH, "max_output_tokens": 4}),
    # migration on: nothing was generated that a continuation could start from, so nothing moves
    "mig-chat": ("/v1/chat/completions", {"model": "mig", "messages": USER, "max_tokens": 4}),
    "mig-chat-stream": (
        "/v1/chat/completions",
        {"model": "mig", "messages": USER, "max_tokens": 4, "stream": True},
    ),
    "mig-chat-cannot-move": (
        "/v1/chat/completions",
        {"model": "mig", "messages": USER, "max_tokens": 4, "logprobs": True},
    ),
}


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Proc]]:
    tmp = tmp_path_factory.mktemp("crash-on")
    procs = [start_fake_engine(tmp, "--crash-on", CRASH) for _ in range(2)]
    yield procs
    for p in procs:
        p.stop()


@asynccontextmanager
async def gateway(tmp: Path, redis_url: str, engines: list[Proc]) -> AsyncIterator[str]:
    prefix = f"g1{uuid.uuid4().hex[:8]}"
    for i, engine in enumerate(engines):
        await register(redis_url, prefix, "m", engine.url, f"m-{i}")
        await register(redis_url, prefix, "e", engine.url, f"e-{i}")
        await register(redis_url, prefix, "mig", engine.url, f"mig-{i}")
    async with serve_gateway(tmp, FLEET, redis_url, prefix, health_interval_s=60) as gw:
        yield gw


async def generations(c: httpx.AsyncClient, engines: list[Proc], rid: str) -> int:
    """The generations both engines began for the client's request id (the gateway adds a suffix)."""
    total = 0
    for engine in engines:
        counted = (await c.get(f"{engine.url}/stats")).json()["generations"]
        total += sum(n for upstream_id, n in counted.items() if upstream_id.startswith(rid))
    return total


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_request_whose_replica_crashed_on_it_runs_once_and_gets_a_clear_502(
    tmp_path: Path, redis_url: str, engines: list[Proc], case: str
) -> None:
    path, body = CASES[case]
    rid = f"once-{case}-{uuid.uuid4().hex[:8]}"
    fine = {k: (v.replace(CRASH, "hi") if isinstance(v, str) else v) for k, v in body.items()}
    if "messages" in fine:
        fine["messages"] = [{"role": "user", "content": "hi"}]
    async with gateway(tmp_path, redis_url, engines) as gw:
        async with httpx.AsyncClient(timeout=30) as c:
            # warm: a kept-alive connection to each replica, which the crash closes after the write
            warm = [await c.post(f"{gw}{path}", json=fine) for _ in range(2)]
            r = await c.post(f"{gw}{path}", json=body, headers={"x-request-id": rid})
            runs = await generations(c, engines, rid)
            after = [await c.post(f"{gw}{path}", json=fine) for _ in range(2)]
    assert [w.status_code for w in warm] == [200, 200]
    assert runs == 1, f"{case}: {runs} generations for one request"
    assert r.status_code == 502, r.text
    assert r.headers["x-should-retry"] == "false"
    if path == "/v1/messages":
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "api_error"
    else:
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
        assert r.json()["error"]["code"] == "upstream_error"
    assert [a.status_code for a in after] == [200, 200]  # one bad prompt takes no model down
