"""Request bodies are bounded in time, and only a caller with a valid key gets one read (real gateway,
keys on, FAKE ENGINE, real Redis, raw sockets): the key is checked from the head before any of the body
is read (a missing or bad key: 401 at once, the connection closed), and a body that does not arrive
within ``body_timeout_s`` plus its size at ``body_min_rate_bytes_s`` gets 408 in the API's shape,
``x-should-retry: true`` (nothing ran)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from gateway.auth.keys import ApiKey, KeyStore, new_secret
from llmgw_contract.redis_keys import RedisKeys
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import Proc, start_fake_engine

FLEET = fleet_yaml([{"name": "m", "source": {"path": "/nonexistent"}}])
BODY = b'{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}'
PAD = b" " * 2900  # JSON whitespace: a 3,000-byte body of one small request


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"))
    yield proc
    proc.stop()


@pytest.fixture
async def secret(redis_url: str, prefix: str) -> AsyncIterator[str]:
    redis = aioredis.Redis.from_url(redis_url)
    key_id, secret = new_secret()
    await KeyStore(redis, RedisKeys(prefix)).create(ApiKey(key_id, f"tenant-{key_id}", ("m",)), secret)
    yield secret
    await redis.aclose()


@pytest.fixture
async def gateway(tmp_path: Path, redis_url: str, prefix: str, engine: Proc) -> AsyncIterator[str]:
    await register(redis_url, prefix, "m", engine.url, "m-0")
    limits = {"body_timeout_s": 0.5, "body_min_rate_bytes_s": 2000}
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix, auth=True, **limits) as url:
        yield url


async def upload_head(
    url: str, length: int, key: str = ""
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
    head += f"authorization: Bearer {key}\r\n" if key else ""
    writer.write(f"{head}content-length: {length}\r\n\r\n".encode())
    await writer.drain()
    return reader, writer


async def answer_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """Everything the gateway sends until it closes the connection, which it must do within ``seconds``."""
    async with asyncio.timeout(seconds):
        return await reader.read(-1)


@pytest.mark.parametrize("key", ["", "llmgw-nope-nope"])
async def test_a_stalled_upload_without_a_valid_key_gets_401_at_once(gateway: str, key: str) -> None:
    """Defect 6a: the body was read before the key was checked, with no time limit (32 stalled keyless
    uploads held +131 MiB for as long as their clients liked)."""
    reader, writer = await upload_head(gateway, 4_000_000, key)
    writer.write(b"{" + b" " * 1000)  # a little of a 4 MB body, then nothing
    await writer.drain()
    started = time.perf_counter()
    answer = await answer_within(reader, 2.0)  # well before body_timeout_s + 4 MB at the minimum rate
    writer.close()
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
    assert b'"code":"invalid_api_key"' in answer
    assert time.perf_counter() - started < 0.4  # the key is checked without waiting for any body


async def test_a_stalled_upload_with_a_key_gets_408_after_the_body_deadline(
    gateway: str, secret: str
) -> None:
    reader, writer = await upload_head(gateway, 4000, secret)
    writer.write(b"{" + b" " * 100)
    await writer.drain()
    started = time.perf_counter()
    answer = await answer_within(reader, 3.0)
    waited = time.perf_counter() - started
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    head = answer.partition(b"\r\n\r\n")[0].lower()
    assert b"x-should-retry: true" in head and b"connection: close" in head
    assert b'"code":"request_timeout"' in answer and b'"type":"invalid_request_error"' in answer
    assert 0.4 <= waited < 1.5  # 0.5 s plus 101 bytes at 2,000 B/s


async def test_a_slow_upload_above_the_minimum_rate_is_served(gateway: str, secret: str) -> None:
    body = BODY[:-1] + PAD + b"}"
    reader, writer = await upload_head(gateway, len(body), secret)
    for i in range(0, len(body), 1000):  # 1,000 bytes every 0.4 s: 2,500 B/s, past the 0.5 s grace
        writer.write(body[i : i + 1000])
        await writer.drain()
        await asyncio.sleep(0.4)
    async with asyncio.timeout(10):
        head = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    assert head.startswith(b"HTTP/1.1 200 "), head
