"""Limits at the door, before authentication, on a real gateway (keys on) and a real socket: a request
line and headers over 64 KiB get 431 without being buffered, a head not complete within the header-read
timeout gets 408."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psutil
import pytest

from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import Proc, start_fake_engine

FLEET = fleet_yaml([{"name": "m", "source": {"path": "/nonexistent"}}])
MIB = 1 << 20


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"))
    yield proc
    proc.stop()


@pytest.fixture
async def gateway(tmp_path: Path, redis_url: str, prefix: str, engine: Proc) -> AsyncIterator[str]:
    await register(redis_url, prefix, "m", engine.url, "m-0")
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix, auth=True, header_timeout_s=0.5) as url:
        yield url


def hostport(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


async def read_all(reader: asyncio.StreamReader) -> bytes:
    async with asyncio.timeout(10):
        return await reader.read(-1)


async def test_a_100_mib_header_gets_431_and_is_never_buffered(gateway: str) -> None:
    """Defect 3: a 100 MiB header was read before authentication (+80 MB RSS)."""
    me = psutil.Process()
    before = peak = me.memory_info().rss
    reader, writer = await asyncio.open_connection(*hostport(gateway))
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nx-big: ")
    piece = b"a" * MIB
    try:
        for _ in range(100):
            writer.write(piece)
            await writer.drain()
            peak = max(peak, me.memory_info().rss)
    except ConnectionError:
        pass  # the gateway may have stopped reading: what it answered is still there to read
    answer = await read_all(reader)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b'"code":"request_header_fields_too_large"' in answer
    assert peak - before < 32 * MIB, f"RSS grew {(peak - before) / MIB:.0f} MiB"


async def test_a_head_not_complete_in_time_gets_408(gateway: str) -> None:
    reader, writer = await asyncio.open_connection(*hostport(gateway))
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\n")  # never ends its head
    await writer.drain()
    answer = await read_all(reader)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b'"code":"request_timeout"' in answer


async def test_a_normal_head_passes_the_door(gateway: str) -> None:
    reader, writer = await asyncio.open_connection(*hostport(gateway))
    writer.write(b"GET /v1/models HTTP/1.1\r\nhost: gw\r\nx-pad: " + b"p" * 60_000 + b"\r\n\r\n")
    await writer.drain()
    async with asyncio.timeout(10):
        head = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    assert head.startswith(b"HTTP/1.1 401 ")  # past the door: authentication answers
