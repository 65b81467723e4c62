"""Fixtures for the admission tests: a fresh key prefix per test on the session's real Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from gateway.admission.queue_scripts import QueueScripts
from gateway.admission.redis_queue import RedisAdmission
from gateway.admission.redis_wire import PipelinedRedis
from gateway.redis_clients import blocking_client, fast_client
from llmgw_contract.redis_keys import RedisKeys
from testing.procs import make_certs

MakeAdmission = Callable[..., Awaitable[RedisAdmission]]


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The TLS tests' server certificate, which is also the CA their clients verify it against."""
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def keys() -> RedisKeys:
    return RedisKeys(f"t{uuid.uuid4().hex[:10]}")


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = fast_client(redis_url, 2.0)
    yield client
    await client.aclose()


@pytest.fixture
def scripts(redis: aioredis.Redis, keys: RedisKeys) -> QueueScripts:
    return QueueScripts(PipelinedRedis.like(redis, 2.0), keys, ttl_ms=30_000)


@pytest.fixture
async def make_admission(redis_url: str, keys: RedisKeys) -> AsyncIterator[MakeAdmission]:
    """Builds RedisAdmission instances (one per 'gateway'); started ones renew their leases."""
    made: list[RedisAdmission] = []

    async def make(
        gateway_id: str = "gw", ttl_s: float = 30.0, start: bool = True, beat_s: float = 1.0
    ) -> RedisAdmission:
        adm = RedisAdmission(
            fast_client(redis_url, 2.0),
            blocking_client(redis_url, 2.0, 256),
            keys,
            gateway_id,
            ttl_s,
            io_timeout_s=2.0,
            beat_s=beat_s,
        )
        if start:
            await adm.start()
        made.append(adm)
        return adm

    yield make
    for adm in made:
        await adm.stop()
