"""The shared prefix index through real gateways in front of the FAKE ENGINE, on a real Redis: two
gateways decide as the reference does for an interleaved sequence; Redis lost mid-load is degraded mode
with no failed request, and shared again once back; a restarted or departed replica's entries go."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from gateway.routing.prefix.chain import request_chain
from gateway.routing.prefix.index import (
    PickInput,
    PrefixIndex,
    ReplicaView,
    bound_ratio,
    capacity_keys,
    tie_hash,
)
from llmgw_contract.redis_keys import RedisKeys
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import free_port_run, start_fake_engine, start_redis

MODEL = "m"
N = 3
SYSTEM = "You answer questions about the attached document. " * 30


def fleet(endpoints: list[str] | None = None) -> str:
    model: dict[str, Any] = {"name": MODEL, "policy": "prefix_affinity", "max_queue_wait_s": 30}
    if endpoints:
        model["endpoints"] = [{"url": url, "auth": "none"} for url in endpoints]
    else:
        model["source"] = {"path": "/nonexistent"}
    return fleet_yaml([model])


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """N fake engines served by one FAKE ENGINE process on consecutive ports."""
    port = free_port_run(N)
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"), "--ports", str(N), port=port)
    yield [f"http://127.0.0.1:{p}" for p in range(port, port + N)]
    proc.stop()


def body(messages: list[dict[str, str]], user: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"model": MODEL, "messages": messages, "max_tokens": 2}
    if user:
        out["user"] = user
    return out


def sequence() -> list[dict[str, Any]]:
    """Conversations whose turns grow, template questions on one shared document, sessions."""
    out: list[dict[str, Any]] = []
    for turn in range(3):
        for c in range(4):
            history = [{"role": "system", "content": f"Conversation {c}. " + SYSTEM}]
            for t in range(turn):
                history += [
                    {"role": "user", "content": f"q{t}"},
                    {"role": "assistant", "content": "tok0 tok1 "},
                ]
            out.append(
                body([*history, {"role": "user", "content": f"q{turn}"}], user=f"u{c}" if c % 2 else None)
            )
        out.append(
            body([{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"doc question {turn}"}])
        )
    return out


async def served(http: httpx.AsyncClient, engines: list[str]) -> list[int]:
    return [int((await http.get(f"{url}/stats")).json()["served"]) for url in engines]


async def test_two_gateways_decide_as_the_reference(
    tmp_path: Path, redis_url: str, prefix: str, engines: list[str], http: httpx.AsyncClient
) -> None:
    """Requests one at a time, alternating between two gateways (loads all 0: the in-flight share is
    published once at start): each lands where the pure reference index sends it."""
    ids = [f"r{i}" for i in range(N)]
    for rid, url in zip(ids, engines, strict=True):
        await register(redis_url, prefix, MODEL, url, rid, instance=f"{rid}-a")
    slow_share = {"load_share_interval_s": 3600.0}
    ref = PrefixIndex()
    cap = capacity_keys(65536, 512)
    views = tuple(ReplicaView(rid, f"{rid}-a", 0, cap) for rid in ids)
    async with (
        serve_gateway(tmp_path, fleet(), redis_url, prefix, **slow_share) as g1,
        serve_gateway(tmp_path, fleet(), redis_url, prefix, **slow_share) as g2,
    ):
        for i, payload in enumerate(sequence()):
            before = await served(http, engines)
            r = await http.post(f"{(g1, g2)[i % 2]}/v1/chat/completions", json=payload)
            assert r.status_code == 200, r.text
            after = await served(http, engines)
            got = [rid for rid, a, b in zip(ids, after, before, strict=True) if a > b]
            want = ref.pick(
                PickInput(request_chain(payload, 512, 64), views, bound_ratio(0.25), payload.get("user"))
            )
            assert got == [want.replica], f"request {i}: {want}"
        metrics = (await http.get(f"{g1}/metrics")).text
        ready = (await http.get(f"{g1}/ready")).json()
    assert 'outcome="hit"' in metrics and 'outcome="cold"' in metrics
    assert "llmgw_prefix_index_shared 1.0" in metrics
    assert re.search(r'llmgw_prefix_index_keys\{mode="approximate",model="m"\} 3', metrics)
    assert ready["prefix_index"] == "shared" and ready["prefix_index_keys"] == "approximate"


async def test_redis_lost_mid_load_degrades_without_a_failed_request(
    tmp_path: Path, prefix: str, engines: list[str], http: httpx.AsyncClient
) -> None:
    redis_proc = start_redis(tmp_path / "redis")
    url = f"redis://127.0.0.1:{redis_proc.port}/0"
    statuses: Counter[int] = Counter()
    stop = asyncio.Event()
    payloads = sequence()

    async def client(k: int, gw: str) -> None:
        i = k
        while not stop.is_set():
            r = await http.post(f"{gw}/v1/chat/completions", json=payloads[i % len(payloads)], timeout=15)
            statuses[r.status_code] += 1
            i += 7

    async def mode(gw: str, want: str) -> bool:
        return bool((await http.get(f"{gw}/ready")).json()["prefix_index"] == want)

    async def more(n: int) -> None:
        at = sum(statuses.values())
        await until(lambda: sum(statuses.values()) >= at + n, 20, f"{n} more answers")

    try:
        async with serve_gateway(
            tmp_path, fleet(engines), url, prefix, presence_interval_s=0.1, admission_redis_timeout_s=0.5
        ) as gw:
            load = [asyncio.create_task(client(k, gw)) for k in range(6)]
            await more(20)
            assert await mode(gw, "shared")
            redis_proc.stop()
            await until(lambda: mode(gw, "degraded"), 10, "degraded mode")
            await more(30)
            degraded = (await http.get(f"{gw}/metrics")).text
            redis_proc = start_redis(tmp_path / "redis", port=redis_proc.port)
            await until(lambda: mode(gw, "shared"), 10, "shared mode")
            await more(30)
            stop.set()
            await asyncio.wait_for(asyncio.gather(*load), 20)
            back = (await http.get(f"{gw}/metrics")).text
    finally:
        redis_proc.stop()
    assert set(statuses) == {200}, statuses
    assert 'llmgw_prefix_index_picks_total{model="m",outcome="degraded"}' in degraded
    assert "llmgw_prefix_index_shared 0.0" in degraded
    assert "llmgw_prefix_index_shared 1.0" in back


async def test_restarted_or_departed_replica_loses_its_entries(
    tmp_path: Path, redis_url: str, prefix: str, engines: list[str], http: httpx.AsyncClient
) -> None:
    keys = RedisKeys(prefix)
    r = aioredis.Redis.from_url(redis_url, decode_responses=True)
    for i, url in enumerate(engines[:2]):
        await register(redis_url, prefix, MODEL, url, f"r{i}", instance="a")

    async def holders() -> dict[str, list[str]]:
        return {k: v.split(" ") for k, v in (await r.hgetall(keys.prefix_holders(MODEL))).items()}

    async def send(gw: str, tag: str, n: int) -> None:
        for j in range(n):
            msg = [{"role": "user", "content": f"{tag} {j} " * 200}]
            assert (await http.post(f"{gw}/v1/chat/completions", json=body(msg))).status_code == 200

    try:
        async with serve_gateway(tmp_path, fleet(), redis_url, prefix) as gw:
            await send(gw, "before", 8)
            old = set(await r.zrange(keys.prefix_lru(MODEL, "r0"), 0, -1))
            first = await holders()
            assert old and all(first[k][0] == "r0" for k in old)
            await register(redis_url, prefix, MODEL, engines[0], "r0", instance="b")  # r0 restarted

            async def restart_seen() -> bool:
                await send(gw, "after", 1)
                return bool(await r.hget(keys.prefix_instances(MODEL), "r0") == "b")

            await until(restart_seen, 10, "the restart seen by the index")
            now = await holders()
            assert not any("r0" in now.get(k, []) for k in old)
            assert not old & set(await r.zrange(keys.prefix_lru(MODEL, "r0"), 0, -1))

            await r.hdel(keys.registry(MODEL), "r1")  # r1 leaves the registry

            async def departure_seen() -> bool:
                return not await r.hexists(keys.prefix_instances(MODEL), "r1")

            await until(departure_seen, 10, "the departure seen by the index")
            assert not any("r1" in hs for hs in (await holders()).values())
            assert not await r.exists(keys.prefix_lru(MODEL, "r1"))
    finally:
        await r.aclose()


async def test_a_migrated_stream_leaves_its_prefix_on_the_replica_it_was_placed_on(
    tmp_path: Path, redis_url: str
) -> None:
    """FAKE ENGINE: the replica a document is placed on stalls the stream after 4 tokens, the gateway
    moves it to the other replica (a detour), and the document keeps its one holder: the next request
    for it goes back there (under cache pressure a moved stream must not leave the document on both)."""
    stall = start_fake_engine(tmp_path, "--fault", "stall-after-4")
    good = start_fake_engine(tmp_path)
    prefix = f"pxm{tmp_path.name[-8:]}"
    try:
        ids = ["m-0", "m-1"]  # m-0 stalls
        for rid, proc in zip(ids, (stall, good), strict=True):
            await register(redis_url, prefix, MODEL, proc.url, rid)
        # a document whose cold placement (idle, empty index: the tie hash) is m-0
        doc = next(
            d
            for d in (f"Document {i}. " + SYSTEM for i in range(64))
            if min(ids, key=lambda r: tie_hash(request_chain(doc_body(d, "q"), 512, 64)[0], r)) == "m-0"
        )
        keys = RedisKeys(prefix)
        fleet_text = fleet_yaml([{"name": MODEL, "source": {"path": "/x"}, "policy": "prefix_affinity"}])
        async with serve_gateway(tmp_path, fleet_text, redis_url, prefix, migration_stall_s=0.5) as gw:
            async with httpx.AsyncClient(timeout=30) as c:
                r = await c.post(f"{gw}/v1/chat/completions", json={**doc_body(doc, "q1"), "stream": True})
                assert r.status_code == 200 and "[DONE]" in r.text
                moved = 'llmgw_migrations_total{model="m",outcome="continued"} 1.0'
                assert moved in (await c.get(f"{gw}/metrics")).text
                redis = aioredis.Redis.from_url(redis_url)
                try:
                    chain = request_chain(doc_body(doc, "q1"), 512, 64)
                    holders = await redis.hmget(keys.prefix_holders(MODEL), list(chain))
                    assert {h.decode() for h in holders if h is not None} == {"m-0"}
                    assert await redis.zcard(keys.prefix_lru(MODEL, "m-1")) == 0
                    recent = [x.decode() for x in await redis.lrange(keys.prefix_recent(MODEL), 0, -1)]
                    assert recent == ["m-1", "m-0"]  # the detour counts toward m-1's share
                finally:
                    await redis.aclose()
    finally:
        stall.stop()
        good.stop()


def doc_body(doc: str, question: str) -> dict[str, Any]:
    """A question on a document, 8 tokens long (the stalling engine stops after 4)."""
    messages = [{"role": "system", "content": doc}, {"role": "user", "content": question}]
    return {**body(messages), "max_tokens": 8}
