"""Key lookups cached per gateway for ``auth_cache_s`` and dropped at once when a key changes: a second
lookup of a key makes no Redis round trip (counted by the key store's own INFO commandstats, on a
redis-server of its own), a revoke through one gateway's admin API is refused by the other gateway on the
next request, and past its TTL a key is read again."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from gateway.auth.key_changes import KeyChanges
from gateway.auth.keys import ApiKey, KeyStore, hash_secret, new_secret
from gateway.auth.ratelimit import RateLimiter
from gateway.auth.redis_auth import RedisAuth
from gateway.errors import Unauthorized
from gateway.metrics import GatewayMetrics
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import Proc, start_fake_engine, start_redis
from tests.conftest import Topologies

ADMIN = "admin-key-of-sixteen-chars-or-more"
FLEET = fleet_yaml([{"name": "m", "source": {"path": "/nonexistent"}, "policy": "round_robin"}])
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.fixture
def key_server(tmp_path: Path) -> Iterator[Proc]:
    proc = start_redis(tmp_path / "keys")
    yield proc
    proc.stop()


@pytest.fixture
async def own_store(key_server: Proc) -> AsyncIterator[KeyStore]:
    client = aioredis.Redis.from_url(f"redis://127.0.0.1:{key_server.port}/0")
    yield KeyStore(client, RedisKeys(f"t{uuid.uuid4().hex[:8]}"))
    await client.aclose()


async def gets(store: KeyStore) -> int:
    """GETs the key store's Redis has run so far (its own count, every client together)."""
    stats = await store.redis.info("commandstats")
    return int(stats.get("cmdstat_get", {}).get("calls", 0))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def stepped(changes: KeyChanges, done: Callable[[], bool]) -> bool:
    """One step of the change channel's loop (as the lifespan runs it), then whether ``done``."""
    await changes.step()
    return done()


async def watched(store: KeyStore, clock: Clock) -> tuple[RedisAuth, KeyChanges]:
    auth = RedisAuth(store, RateLimiter(store.redis, store.keys), GatewayMetrics(), cache_s=5.0, clock=clock)
    changes = auth.changes
    changes.listen_s = 0.05
    await until(lambda: stepped(changes, lambda: auth.cache.subscribed), 5, "subscribed", interval_s=0)
    return auth, changes


async def test_a_second_lookup_makes_no_redis_round_trip(own_store: KeyStore) -> None:
    key_id, secret = new_secret()
    await own_store.create(ApiKey(key_id, "acme"), secret)
    auth, changes = await watched(own_store, Clock())
    headers = {"authorization": f"Bearer {secret}"}
    try:
        assert (await auth.authenticate(headers)).key_id == key_id
        before = await gets(own_store)
        for _ in range(3):
            assert (await auth.authenticate(headers)).key_id == key_id
        assert await gets(own_store) == before
    finally:
        await changes.close()


async def test_past_its_ttl_a_key_is_read_again(own_store: KeyStore) -> None:
    key_id, secret = new_secret()
    await own_store.create(ApiKey(key_id, "acme"), secret)
    clock = Clock()
    auth, changes = await watched(own_store, clock)
    headers = {"authorization": f"Bearer {secret}"}
    try:
        await auth.authenticate(headers)
        before = await gets(own_store)
        clock.now += 4.9
        await auth.authenticate(headers)
        assert await gets(own_store) == before
        clock.now += 0.2
        await auth.authenticate(headers)
        assert await gets(own_store) == before + 1
    finally:
        await changes.close()


async def test_requests_in_flight_when_a_key_expires_read_it_once(key_server: Proc) -> None:
    """256 requests of one key in flight as its entry expires share one read: none is refused for a pool
    of 10 connections (redis-py's "Too many connections", a 503 before), and the store runs one GET."""
    client = aioredis.Redis.from_url(f"redis://127.0.0.1:{key_server.port}/0", max_connections=10)
    store = KeyStore(client, RedisKeys(f"t{uuid.uuid4().hex[:8]}"))
    key_id, secret = new_secret()
    await store.create(ApiKey(key_id, "acme"), secret)
    clock = Clock()
    auth, changes = await watched(store, clock)
    headers = {"authorization": f"Bearer {secret}"}
    try:
        await auth.authenticate(headers)
        clock.now += 5.1
        before = await gets(store)
        callers = await asyncio.gather(*(auth.authenticate(headers) for _ in range(256)))
        assert {c.key_id for c in callers} == {key_id}
        assert await gets(store) == before + 1
    finally:
        await changes.close()
        await client.aclose()


async def test_a_revoke_is_seen_by_the_next_lookup(own_store: KeyStore) -> None:
    key_id, secret = new_secret()
    await own_store.create(ApiKey(key_id, "acme"), secret)
    auth, changes = await watched(own_store, Clock())
    headers = {"authorization": f"Bearer {secret}"}
    try:
        await auth.authenticate(headers)
        epoch = auth.cache.epoch
        assert await own_store.revoke(key_id)
        await until(lambda: stepped(changes, lambda: auth.cache.epoch > epoch), 5, "the change", interval_s=0)
        with pytest.raises(Unauthorized):
            await auth.authenticate(headers)
    finally:
        await changes.close()


@pytest.mark.parametrize("kind", ["sentinel", "cluster"])
async def test_a_revoke_reaches_the_cache_on_every_topology(topologies: Topologies, kind: str) -> None:
    client = connect(topologies.get(kind).url)
    store = KeyStore(client, RedisKeys(f"t{uuid.uuid4().hex[:8]}"))
    key_id, secret = new_secret()
    await store.create(ApiKey(key_id, "acme"), secret)
    auth, changes = await watched(store, Clock())
    headers = {"authorization": f"Bearer {secret}"}
    try:
        await auth.authenticate(headers)
        assert auth.cache.fresh(hash_secret(secret), 1000.0) is not None
        epoch = auth.cache.epoch
        assert await store.revoke(key_id)
        await until(lambda: stepped(changes, lambda: auth.cache.epoch > epoch), 5, "the change", interval_s=0)
        with pytest.raises(Unauthorized):
            await auth.authenticate(headers)
    finally:
        await changes.close()
        await client.aclose()


async def test_without_a_subscription_every_lookup_reads_the_store(own_store: KeyStore) -> None:
    """A change announced while the gateway was not subscribed would be missed: no cache until it is."""
    key_id, secret = new_secret()
    await own_store.create(ApiKey(key_id, "acme"), secret)
    auth = RedisAuth(own_store, RateLimiter(own_store.redis, own_store.keys), GatewayMetrics())
    headers = {"authorization": f"Bearer {secret}"}
    await auth.authenticate(headers)
    before = await gets(own_store)
    await auth.authenticate(headers)
    assert await gets(own_store) == before + 1


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path / "fake", "--tokens", "3")
    yield proc
    proc.stop()


async def test_a_revoke_through_one_gateway_is_refused_by_the_other_at_once(
    tmp_path: Path, redis_url: str, prefix: str, engine: Proc, key_server: Proc, own_store: KeyStore
) -> None:
    await register(redis_url, prefix, "m", engine.url, "m-0")
    store_url = f"redis://127.0.0.1:{key_server.port}/0"
    store = KeyStore(own_store.redis, RedisKeys(prefix))
    settings = {"auth": True, "keys_redis_url": store_url, "admin_key": ADMIN}
    admin = {"authorization": f"Bearer {ADMIN}"}
    async with (
        serve_gateway(tmp_path, FLEET, redis_url, prefix, **settings) as g1,
        serve_gateway(tmp_path, FLEET, redis_url, prefix, **settings) as g2,
        httpx.AsyncClient(timeout=30) as http,
    ):
        made = (
            await http.post(f"{g1}/admin/keys", json={"tenant": "acme", "rpm": 1000}, headers=admin)
        ).json()
        user = {"authorization": f"Bearer {made['secret']}"}
        assert (await http.post(f"{g2}/v1/chat/completions", json=BODY, headers=user)).status_code == 200
        before = await gets(store)
        assert (await http.post(f"{g2}/v1/chat/completions", json=BODY, headers=user)).status_code == 200
        assert await gets(store) == before  # g2 answered from its cache
        r = await http.delete(f"{g1}/admin/keys/{made['key_id']}", headers=admin)
        assert r.status_code == 200, r.text
        r = await http.post(f"{g2}/v1/chat/completions", json=BODY, headers=user)
        assert r.status_code == 401, r.text
