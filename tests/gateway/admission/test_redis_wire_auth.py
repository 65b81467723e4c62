"""The lean admission connection speaks to a secured Redis as redis-py does: an ACL user with a password,
and TLS (``rediss://``), against a real redis-server configured that way (the default user disabled)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError

from gateway.admission.base import Ticket
from gateway.admission.redis_queue import RedisAdmission
from gateway.admission.redis_wire import PipelinedRedis, RedisReplyError
from gateway.redis_clients import blocking_client, fast_client
from llmgw_contract.redis_keys import RedisKeys
from testing.procs import Proc, free_port, start_redis, tls_args

ACL = ["--user", "default", "off", "--user", "gw", "on", ">s3cret-pw", "~*", "&*", "+@all"]


@pytest.fixture(scope="module")
def acl_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_redis(tmp_path_factory.mktemp("acl-redis"), extra=ACL)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[Proc]:
    port = free_port()
    proc = start_redis(tmp_path_factory.mktemp("tls-redis"), port=port, extra=tls_args(certs, port) + ACL)
    yield proc
    proc.stop()


async def roundtrip(url: str) -> None:
    """redis-py and the lean connection both run a script and read what the other wrote."""
    client = fast_client(url, 2.0)
    lean = PipelinedRedis.like(client, 2.0)
    try:
        await client.set("wire-test", "from-redis-py")
        got = await lean.call("EVAL", "return redis.call('GET', KEYS[1])", 1, "wire-test")
        assert got == b"from-redis-py"
        assert await lean.call("SET", "wire-test", "from-lean") == "OK"
        assert await client.get("wire-test") == b"from-lean"
    finally:
        lean.close()
        await client.aclose()


async def test_acl_user_and_password(acl_redis: Proc) -> None:
    await roundtrip(f"redis://gw:s3cret-pw@127.0.0.1:{acl_redis.port}/2")


async def test_wrong_password_is_refused_not_ignored(acl_redis: Proc) -> None:
    client = aioredis.Redis.from_url(f"redis://gw:wrong@127.0.0.1:{acl_redis.port}/0")
    lean = PipelinedRedis.like(client, 2.0)
    try:
        with pytest.raises(RedisReplyError, match="WRONGPASS"):
            await lean.call("PING")
        with pytest.raises(AuthenticationError):
            await client.ping()
    finally:
        lean.close()
        await client.aclose()


async def test_tls_with_acl_user(tls_redis: Proc, certs: Path) -> None:
    ca = certs / "cert.pem"
    await roundtrip(f"rediss://gw:s3cret-pw@localhost:{tls_redis.port}/1?ssl_ca_certs={ca}")


async def test_tls_refuses_an_untrusted_server(tls_redis: Proc) -> None:
    client = aioredis.Redis.from_url(f"rediss://gw:s3cret-pw@localhost:{tls_redis.port}/0")
    lean = PipelinedRedis.like(client, 2.0)
    try:
        with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
            await lean.call("PING")
    finally:
        lean.close()
        await client.aclose()


async def test_shared_queue_through_an_acl_user_over_tls(tls_redis: Proc, certs: Path) -> None:
    """The whole admission (its redis-py clients, blocking pool and lean connection) on a secured Redis:
    a slot is taken, a second request waits, the release hands the slot over."""
    url = f"rediss://gw:s3cret-pw@localhost:{tls_redis.port}/0?ssl_ca_certs={certs / 'cert.pem'}"
    adm = RedisAdmission(
        fast_client(url, 2.0), blocking_client(url, 2.0, 8), RedisKeys("acl"), "gw", 30.0, io_timeout_s=2.0
    )
    await adm.start()
    try:
        first, _ = await adm.acquire(Ticket("a", "m", "t", 0, 1, 10, 10), 1)
        second = asyncio.create_task(adm.acquire(Ticket("b", "m", "t", 0, 1, 10, 10), 1))
        await first.release()
        lease, _ = await asyncio.wait_for(second, 10)
        await lease.release()
    finally:
        await adm.stop()
