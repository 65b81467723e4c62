"""API keys survive a restart of their Redis (the key store persists every write, AOF), while the state
Redis comes back empty (nothing stale); `llmgw-keys export/import` round-trips keys; a revoked key stops
working within the cache bound even on a gateway cut off from the key store. Real redis-servers, killed -9."""

from __future__ import annotations

import io
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.auth import cli
from gateway.auth.keys import ApiKey, KeyStore, new_secret
from gateway.auth.ratelimit import RateLimiter
from gateway.auth.redis_auth import RedisAuth
from gateway.errors import KeyStoreUnavailable
from gateway.metrics import GatewayMetrics
from llmgw_contract.redis_keys import RedisKeys
from llmgw_tools.stack.redis import redis_server_argv
from testing.procs import Proc, free_port, port_open, spawn, wait_until


def start(data: Path, port: int, persistent: bool) -> Proc:
    """The production command line of either Redis role (workers.life.process), on a fixed port and folder."""
    data.mkdir(parents=True, exist_ok=True)
    argv = redis_server_argv("redis-server", port, data, persistent=persistent)
    proc = spawn(argv, port, data / "redis.log")
    wait_until(lambda: port_open(port), 10, "redis-server")
    return proc


@pytest.fixture
def key_store_server(tmp_path: Path) -> Proc:
    return start(tmp_path / "keys", free_port(), persistent=True)


@pytest.fixture
async def store(key_store_server: Proc) -> AsyncIterator[KeyStore]:
    client = aioredis.Redis.from_url(f"redis://127.0.0.1:{key_store_server.port}/0")
    yield KeyStore(client, RedisKeys(f"t{uuid.uuid4().hex[:8]}"))
    await client.aclose()
    key_store_server.stop()


async def make_key(store: KeyStore, tenant: str = "acme") -> tuple[ApiKey, str]:
    key_id, secret = new_secret()
    key = ApiKey(key_id, tenant, ("m",), rpm=10)
    await store.create(key, secret)
    return key, secret


def restart(proc: Proc, tmp_path: Path, name: str, persistent: bool) -> Proc:
    proc.kill(signal.SIGKILL)
    return start(tmp_path / name, proc.port, persistent)


async def test_keys_and_revocations_survive_kill_9(
    store: KeyStore, key_store_server: Proc, tmp_path: Path
) -> None:
    kept, kept_secret = await make_key(store)
    gone, gone_secret = await make_key(store, "other")
    assert await store.revoke(gone.key_id)
    server = restart(key_store_server, tmp_path, "keys", persistent=True)
    try:
        await store.redis.connection_pool.disconnect()
        assert await store.lookup(kept_secret) == kept
        assert await store.lookup(gone_secret) is None
        assert [k.key_id for k in await store.list()] == [kept.key_id]
    finally:
        server.stop()


async def test_state_redis_comes_back_empty(tmp_path: Path) -> None:
    """What the state Redis holds (leases, queue, in-flight counts) never comes back after a restart."""
    server = start(tmp_path / "state", free_port(), persistent=False)
    client = aioredis.Redis.from_url(f"redis://127.0.0.1:{server.port}/0")
    keys = RedisKeys("stale")
    try:
        await client.hset(keys.inflight("m"), "gw-1|replica-0", 5)
        await client.zadd(keys.queue("m"), {"ticket": 1})
        server = restart(server, tmp_path, "state", persistent=False)
        await client.connection_pool.disconnect()
        assert await client.dbsize() == 0
    finally:
        await client.aclose()
        server.stop()


async def test_export_then_import_into_another_store(store: KeyStore, redis_url: str) -> None:
    key, secret = await make_key(store)
    out = io.StringIO()
    assert await cli.export_keys(store, out) == 0
    assert secret not in out.getvalue() and secret.rsplit("-", 1)[-1] not in out.getvalue()
    client = aioredis.Redis.from_url(redis_url)
    other = KeyStore(client, RedisKeys(f"t{uuid.uuid4().hex[:8]}"))
    try:
        assert await other.lookup(secret) is None
        assert await cli.import_keys(other, io.StringIO(out.getvalue())) == 0
        assert await other.lookup(secret) == key
    finally:
        await client.aclose()


def test_import_refuses_a_bad_line_before_writing(tmp_path: Path, redis_url: str) -> None:
    good = '{"hash": "' + "a" * 64 + '", "key": {"key_id": "k1", "tenant": "t"}}\n'
    bad = '{"hash": "nothex", "key": {"key_id": "k2", "tenant": "t"}}\n'
    path = tmp_path / "keys.jsonl"
    path.write_text(good + bad)
    prefix = f"t{uuid.uuid4().hex[:8]}"
    argv = ["--redis-url", redis_url, "--prefix", prefix]
    assert cli.main([*argv, "import", str(path)]) == 2
    path.write_text(good)
    assert cli.main([*argv, "import", str(path)]) == 0
    export = tmp_path / "out.jsonl"
    assert cli.main([*argv, "export", str(export)]) == 0
    assert export.read_text().count("\n") == 1 and '"k1"' in export.read_text()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_cut_off_gateway_stops_a_revoked_key_within_the_cache_bound(
    store: KeyStore, key_store_server: Proc
) -> None:
    """The gateway verified the key, then lost the key store (which revoked it meanwhile): the key passes
    only within auth_cache_s (5 s) of its last verification, then gets a clear 503 with Retry-After."""
    key, secret = await make_key(store)
    clock = Clock()
    auth = RedisAuth(store, RateLimiter(store.redis, store.keys), GatewayMetrics(), cache_s=5.0, clock=clock)
    headers = {"authorization": f"Bearer {secret}"}
    assert (await auth.authenticate(headers)).key_id == key.key_id
    await store.revoke(key.key_id)
    key_store_server.kill(signal.SIGKILL)
    with pytest.raises((RedisError, OSError)):
        await store.lookup(secret)
    clock.now += 4.9
    assert (await auth.authenticate(headers)).key_id == key.key_id
    clock.now += 0.2
    with pytest.raises(KeyStoreUnavailable) as refused:
        await auth.authenticate(headers)
    assert refused.value.retry_after is not None and refused.value.headers()["x-should-retry"] == "true"
