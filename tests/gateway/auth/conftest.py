"""Fixtures for the API key tests: a fresh key prefix per test on the session's real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.auth.keys import KeyStore
from llmgw_contract.redis_keys import RedisKeys


@pytest.fixture
def keys(prefix: str) -> RedisKeys:
    return RedisKeys(prefix)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def store(redis: aioredis.Redis, keys: RedisKeys) -> KeyStore:
    return KeyStore(redis, keys)
