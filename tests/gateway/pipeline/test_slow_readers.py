"""Clients that stop reading a stream cost nothing for long (real gateway, FAKE ENGINE replicas, real
Redis): a stream that makes no write progress for ``stream_write_timeout_s`` is ended, its upstream
closed, its slot released and counted, and the gateway holds a bounded amount per stream meanwhile."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import free_port_run, start_fake_engine

FLEET = fleet_yaml([{"name": "m", "source": {"path": "/nonexistent"}, "max_queue_wait_s": 5}])
MIB = 1 << 20
READERS = 8  # two replicas of four slots each: every slot of the model
UNREAD_ANSWERS = 24  # non-streamed answers of 50,000 tokens: more than loopback's socket buffers hold


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    port = free_port_run(2)
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"), "--ports", "2", port=port)
    yield [f"http://127.0.0.1:{p}" for p in (port, port + 1)]
    proc.stop()


async def never_reading(host: str, port: int, max_tokens: int = 50000) -> socket.socket:
    """A client that asks for a long stream (about 11 MB at the default) and never reads a byte of it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    body = b'{"model":"m","stream":true,"max_tokens":%d,' % max_tokens
    body += b'"messages":[{"role":"user","content":"hi"}]}'
    head = "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
    head += f"content-length: {len(body)}\r\n\r\n"
    await asyncio.get_running_loop().sock_sendall(sock, head.encode() + body)
    return sock


def stalled(metrics: str) -> float:
    found = re.search(r'llmgw_stream_stalled_total\{model="m"\} ([0-9.]+)', metrics)
    return float(found.group(1)) if found else 0.0


async def test_streams_whose_clients_stop_reading_give_their_slots_back(
    tmp_path: Path, redis_url: str, prefix: str, engines: list[str], http: httpx.AsyncClient
) -> None:
    """Defect 2: eight sockets that stopped reading held every slot of the model for ever (a normal
    request got 429 after its queue limit) while the gateway buffered their whole generations."""
    for i, url in enumerate(engines):
        await register(redis_url, prefix, "m", url, f"m-{i}", concurrency=4)
    me = psutil.Process()
    async with serve_gateway(
        tmp_path, FLEET, redis_url, prefix, stream_write_timeout_s=1.0, health_interval_s=60
    ) as gw:
        host, port = gw.removeprefix("http://").split(":")
        before = peak = me.memory_info().rss
        readers = [await never_reading(host, int(port)) for _ in range(READERS)]
        try:

            async def all_admitted() -> bool:
                nonlocal peak
                peak = max(peak, me.memory_info().rss)
                started = [(await http.get(f"{url}/stats")).json()["started"] for url in engines]
                return sum(started) == READERS

            await until(all_admitted, 30.0, "the readers admitted")
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            r = await http.post(f"{gw}/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text

            async def every_reader_ended() -> bool:
                nonlocal peak
                peak = max(peak, me.memory_info().rss)
                return stalled((await http.get(f"{gw}/metrics")).text) == READERS

            await until(every_reader_ended, 30.0, "every non-reading stream ended")
        finally:
            for sock in readers:
                sock.close()
    assert peak - before < 48 * MIB, f"RSS grew {(peak - before) / MIB:.0f} MiB"


async def trickle(sock: socket.socket, every_s: float, step: int, stop: asyncio.Event) -> int:
    """Read ``step`` bytes every ``every_s`` (enough each time for the gateway's send to go on) until the
    gateway closes the connection or ``stop``; the bytes read."""
    loop, total = asyncio.get_running_loop(), 0
    while not stop.is_set():
        got = 0
        while got < step:
            data = await loop.sock_recv(sock, step - got)
            if not data:
                return total
            got += len(data)
        total += got
        await asyncio.sleep(every_s)
    return total


async def test_a_client_that_reads_a_little_at_a_time_is_cut_and_its_slot_given_back(
    tmp_path: Path, redis_url: str, prefix: str, engines: list[str], http: httpx.AsyncClient
) -> None:
    """Finding 6c: a client that took a little before each send timed out (every 29 s at the defaults)
    held its slot for the whole generation. Scaled to loopback's socket buffers: reading 1 MiB every
    0.5 s (2 MB/s) lets every send go on within the 1 s write timeout, so before the minimum rate the
    46 MB stream ran to its end at the client's pace (about 23 s); against a minimum of 4 MB/s while the
    stream waits for it, the client is cut within a few windows, counted, and its slot is back (one slot
    in all: the next request is served)."""
    await register(redis_url, prefix, "m", engines[0], "m-0", concurrency=1)
    limits = {"stream_write_timeout_s": 1.0, "stream_min_rate_bytes_s": 4_000_000, "health_interval_s": 60}
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix, **limits) as gw:
        host, port = gw.removeprefix("http://").split(":")
        sock = await never_reading(host, int(port), max_tokens=200_000)
        stop = asyncio.Event()
        reader = asyncio.ensure_future(trickle(sock, 0.5, MIB, stop))
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()

            async def cut() -> bool:
                return stalled((await http.get(f"{gw}/metrics")).text) == 1

            await until(cut, 20.0, "the trickling reader cut")
            assert loop.time() - started < 8.0
            assert await asyncio.wait_for(reader, 5.0) < 40 * MIB  # the gateway closed it mid-stream
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            r = await http.post(f"{gw}/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
        finally:
            stop.set()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            sock.close()


async def test_a_connection_whose_client_reads_nothing_is_dropped_after_the_send_timeout(
    tmp_path: Path, redis_url: str, prefix: str, engines: list[str], http: httpx.AsyncClient
) -> None:
    """uvicorn waits for a paused connection without bound before each send: a client that pipelines
    long non-streamed requests and then a stream on one connection, and reads nothing, held that
    connection for ever (and the stream's slot, when the stream was next in line: one slot in all). With
    ``send_timeout_s`` the gateway drops the connection and the slot is free."""
    await register(redis_url, prefix, "m", engines[0], "m-0", concurrency=1)
    limits = {"send_timeout_s": 1.0, "stream_write_timeout_s": 30.0, "health_interval_s": 60}
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix, **limits) as gw:
        host, port = gw.removeprefix("http://").split(":")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(sock, (host, int(port)))
        try:
            requests = b""
            for stream in [b"false"] * UNREAD_ANSWERS + [b"true"]:
                data = b'{"model":"m","stream":%s,"max_tokens":50000,' % stream
                data += b'"messages":[{"role":"user","content":"hi"}]}'
                head = "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
                requests += (head + f"content-length: {len(data)}\r\n\r\n").encode() + data
            await loop.sock_sendall(sock, requests)

            mine, me = sock.getsockname()[1], psutil.Process()

            def dropped() -> bool:  # the gateway runs in this process: its end of the connection is gone
                return all(c.raddr[1] != mine for c in me.net_connections("tcp") if c.raddr)

            assert not dropped()
            await until(dropped, 15.0, "the connection that reads nothing dropped")
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            r = await http.post(f"{gw}/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
        finally:
            sock.close()
