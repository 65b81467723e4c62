"""Every client of llmgw_contract/redis_url.py holds more than a hundred commands at once (redis-py 8's
pools stop at 100 connections by default and fail the 101st at once with ``MaxConnectionsError``, which the
gateway reads as "Redis is down"). Real Redis; one server (async and sync)."""

from __future__ import annotations

import asyncio
import threading

from llmgw_contract.redis_url import POOL_CONNECTIONS, connect, connect_sync

AT_ONCE = 300


async def test_an_async_client_holds_300_commands_at_once(redis_url: str) -> None:
    client = connect(redis_url, socket_timeout=2.0, socket_connect_timeout=2.0)
    try:
        await client.set("pool:probe", "1")
        answers = await asyncio.gather(*(client.get("pool:probe") for _ in range(AT_ONCE)))
    finally:
        await client.aclose()
    assert answers == [b"1"] * AT_ONCE


async def test_a_full_pool_waits_for_a_connection_instead_of_failing(redis_url: str) -> None:
    client = connect(redis_url, socket_timeout=2.0, socket_connect_timeout=2.0, max_connections=4)
    try:
        answers = await asyncio.gather(*(client.ping() for _ in range(40)))
        size = client.connection_pool.max_connections
    finally:
        await client.aclose()
    assert (answers, size) == ([True] * 40, 4)


def test_a_sync_client_shared_by_threads_holds_more_than_100(redis_url: str) -> None:
    client = connect_sync(redis_url, socket_timeout=5.0, socket_connect_timeout=5.0)
    start, errors = threading.Barrier(150), []

    def one() -> None:
        start.wait()
        try:
            client.blpop(["pool:never"], timeout=0.3)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(150)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.close()
    assert errors == []
    assert POOL_CONNECTIONS >= 1024
