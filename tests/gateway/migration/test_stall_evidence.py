"""A stream moves on a stall only on evidence from its replica: no token within the bound learned from
the replica's gaps between tokens, and its own /metrics counters still (or a failed probe). A replica
that is slow between tokens because it prefills other clients' prompts (its counters advance) keeps its
streams: moving them prefilled each twice. Real gateway, FAKE ENGINE replicas."""

from __future__ import annotations

import contextlib
import json
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import Proc, start_fake_engine

N = 12
CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": N}
UNDISTURBED = "".join(f"tok{i} " for i in range(N))
FAST = {"migration_stall_s": 0.5, "migration_watch_s": 0.1, "load_scrape_interval_s": 0.1}
"""A stall bound of 0.5 s (at least), the replicas' metrics read every 0.1 s."""


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Proc]]:
    tmp = tmp_path_factory.mktemp("engines")
    procs = {
        "busy": start_fake_engine(tmp, "--fault", "busy-after-4-2000"),  # 2 s of others' prefill
        "stall": start_fake_engine(tmp, "--fault", "stall-after-4"),  # frozen engine, server answers
        "paced": start_fake_engine(tmp, "--delay-ms", "100"),  # SIGSTOPped mid-stream below
        "good": start_fake_engine(tmp),
    }
    yield procs
    for p in procs.values():
        p.kill(signal.SIGCONT)
        p.stop()


@contextlib.asynccontextmanager
async def gateway(tmp: Path, redis_url: str, urls: list[str], **settings: Any) -> AsyncIterator[str]:
    prefix = f"st{uuid.uuid4().hex[:8]}"
    for i, url in enumerate(urls):
        await register(redis_url, prefix, "m", url, f"m-{i}")
    fleet = fleet_yaml([{"name": "m", "source": {"path": "/x"}, "policy": "round_robin"}])
    async with serve_gateway(tmp, fleet, redis_url, prefix, **{**FAST, **settings}) as gw:
        yield gw


def content(text: str) -> str:
    events = [e.removeprefix("data: ") for e in text.strip().split("\n\n")]
    assert events[-1] == "[DONE]"
    parsed = [json.loads(e) for e in events[:-1]]
    assert not [f for f in parsed if "error" in f]
    return "".join(c.get("delta", {}).get("content") or "" for f in parsed for c in f["choices"])


async def moved(c: httpx.AsyncClient, gw: str) -> bool:
    return 'llmgw_migrations_total{model="m",outcome="continued"} 1.0' in (await c.get(f"{gw}/metrics")).text


async def run(c: httpx.AsyncClient, gw: str, good: Proc, stream: bool) -> tuple[str, int]:
    """The request's content and how many generations the other replica started."""
    await c.get(f"{good.url}/stats/reset")
    r = await c.post(f"{gw}/v1/chat/completions", json={**CHAT, "stream": stream})
    assert r.status_code == 200, r.text
    text = content(r.text) if stream else r.json()["choices"][0]["message"]["content"]
    return text, (await c.get(f"{good.url}/stats")).json()["started"]


@pytest.mark.parametrize("stream", [True, False])
async def test_a_replica_slow_between_tokens_but_progressing_keeps_its_stream(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc], stream: bool
) -> None:
    """No token for 2 s (four times the stall floor) while the replica's prompt token counter advances:
    no move, one generation (it moved at 0.5 s, prefilled twice)."""
    async with gateway(tmp_path, redis_url, [engines["busy"].url, engines["good"].url]) as gw:
        async with httpx.AsyncClient(timeout=30) as c:
            text, elsewhere = await run(c, gw, engines["good"], stream)
            assert not await moved(c, gw)
    assert text == UNDISTURBED and elsewhere == 0


@pytest.mark.parametrize("stream", [True, False])
async def test_a_frozen_engine_whose_metrics_stand_still_is_moved_from(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc], stream: bool
) -> None:
    async with gateway(tmp_path, redis_url, [engines["stall"].url, engines["good"].url]) as gw:
        async with httpx.AsyncClient(timeout=30) as c:
            text, elsewhere = await run(c, gw, engines["good"], stream)
            assert await moved(c, gw)
    assert text == UNDISTURBED and elsewhere == 1


async def test_a_stopped_process_fails_its_probes_and_is_moved_from(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    """SIGSTOP after four tokens: its /metrics and /health no longer answer; the stream moves."""
    paced = engines["paced"]
    settings = {"health_interval_s": 0.1, "health_timeout_s": 0.3}
    async with gateway(tmp_path, redis_url, [paced.url, engines["good"].url], **settings) as gw:
        async with httpx.AsyncClient(timeout=30) as c:
            await c.get(f"{engines['good'].url}/stats/reset")
            seen = b""
            try:
                async with c.stream("POST", f"{gw}/v1/chat/completions", json={**CHAT, "stream": True}) as r:
                    async for part in r.aiter_bytes():
                        seen += part
                        if seen.count(b"\n\n") == 4:
                            paced.kill(signal.SIGSTOP)
            finally:
                paced.kill(signal.SIGCONT)
            assert await moved(c, gw)
    assert content(seen.decode()) == UNDISTURBED
