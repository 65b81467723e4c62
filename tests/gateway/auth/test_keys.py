"""The key store (hashed secrets), the CLI, and the header rules, against a real Redis: the store's tests on
each topology (one server, Sentinel, Cluster; started once per test run)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.auth.cli import main
from gateway.auth.keys import ApiKey, KeyStore, hash_secret, new_secret
from gateway.auth.redis_auth import bearer, caller_for
from gateway.errors import InvalidRequest, Unauthorized
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from llmgw_tools.stack.redis_topology import KINDS
from tests.conftest import Topologies


@pytest.fixture(params=KINDS)
def store_url(request: pytest.FixtureRequest, topologies: Topologies) -> str:
    return topologies.get(str(request.param)).url


@pytest.fixture
async def redis(store_url: str) -> AsyncIterator[aioredis.Redis]:
    """The key store's client on each topology (the package's ``redis`` fixture is one server)."""
    client = connect(store_url, socket_timeout=5.0)
    yield client
    await client.aclose()


async def everything_stored(redis: aioredis.Redis, prefix: str) -> bytes:
    out = b""
    async for name in redis.scan_iter(match=f"{prefix}:*"):
        kind = await redis.type(name)
        value = await (redis.get(name) if kind == b"string" else redis.hgetall(name))
        out += name + repr(value).encode()
    return out


async def test_secret_is_stored_only_as_its_hash(store: KeyStore, redis: aioredis.Redis, prefix: str) -> None:
    key_id, secret = new_secret()
    await store.create(ApiKey(key_id, "acme", ("m",), rpm=5), secret)
    stored = await everything_stored(redis, prefix)
    random_part = secret.split("-", 2)[2]  # whole: token_urlsafe may itself contain "-"
    assert secret.encode() not in stored and random_part.encode() not in stored
    assert hash_secret(secret).encode() in stored
    found = await store.lookup(secret)
    assert found is not None and found.tenant == "acme" and found.models == ("m",) and found.rpm == 5
    assert await store.lookup(secret + "x") is None


async def test_list_and_revoke(store: KeyStore) -> None:
    (id1, s1), (id2, s2) = new_secret(), new_secret()
    await store.create(ApiKey(id1, "a"), s1)
    await store.create(ApiKey(id2, "b"), s2)
    assert {k.key_id for k in await store.list()} == {id1, id2}
    assert await store.revoke(id1)
    assert not await store.revoke(id1)
    assert await store.lookup(s1) is None and await store.lookup(s2) is not None
    assert [k.key_id for k in await store.list()] == [id2]


def test_cli_creates_lists_and_revokes(
    store_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--redis-url", store_url, "--prefix", prefix]
    assert (
        main(
            [
                *base,
                "create",
                "--tenant",
                "acme",
                "--models",
                "m1,m2",
                "--priority",
                "1",
                "--max-priority",
                "5",
                "--rpm",
                "60",
                "--tpm",
                "1000",
                "--max-wait-s",
                "10",
            ]
        )
        == 0
    )
    created = capsys.readouterr().out.splitlines()
    secret = created[-1]
    key_id = created[0].split()[2]
    assert secret.startswith(f"llmgw-{key_id}-")
    assert main([*base, "list"]) == 0
    listing = capsys.readouterr().out
    assert key_id in listing and "acme" in listing and "m1,m2" in listing
    assert secret not in listing and hash_secret(secret) not in listing
    assert main([*base, "revoke", key_id]) == 0
    assert main([*base, "revoke", key_id]) == 1
    capsys.readouterr()
    assert main([*base, "list"]) == 0
    assert key_id not in capsys.readouterr().out


def test_cli_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    assert "--redis-url" in capsys.readouterr().out


def test_cli_rejects_bad_values_and_unreachable_redis(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--redis-url", "redis://127.0.0.1:1/0", "list"]) == 3
    assert main(["--redis-url", "redis://127.0.0.1:1/0", "create", "--tenant", "a", "--rpm", "-1"]) == 2


def test_bearer_header() -> None:
    assert bearer({"authorization": "Bearer abc"}) == "abc"
    for bad in ({}, {"authorization": "Basic abc"}, {"authorization": "Bearer "}):
        with pytest.raises(Unauthorized):
            bearer(bad)


def test_priority_and_wait_headers_are_bounded_by_the_key() -> None:
    key = ApiKey("k", "t", priority=1, max_priority=3, max_wait_s=10)
    assert caller_for(key, {}).priority == 1
    assert caller_for(key, {"x-priority": "2"}).priority == 2
    assert caller_for(key, {"x-priority": "9"}).priority == 3
    assert caller_for(key, {"x-priority": "-4"}).priority == 0
    assert caller_for(key, {}).max_wait_s == 10
    assert caller_for(key, {"x-max-wait-s": "2.5"}).max_wait_s == 2.5
    assert caller_for(key, {"x-max-wait-s": "60"}).max_wait_s == 10
    assert caller_for(ApiKey("k", "t"), {"x-max-wait-s": "60"}).max_wait_s == 60
    for header in ({"x-priority": "high"}, {"x-max-wait-s": "0"}, {"x-max-wait-s": "nan"}):
        with pytest.raises(InvalidRequest):
            caller_for(key, header)


def test_key_validation() -> None:
    with pytest.raises(ValueError):
        ApiKey("k", "")
    with pytest.raises(ValueError):
        ApiKey("k", "t", rpm=-1)
    assert ApiKey("k", "t", priority=4).max_priority == 4
    key = ApiKey("k", "t", ("a",), rpm=3, max_wait_s=2.5)
    assert ApiKey.from_json(key.to_json()) == key


async def test_unused_prefix_is_empty(store: KeyStore, keys: RedisKeys) -> None:
    assert await store.list() == []
