"""A queued waiter whose blocking read fails because Redis Cluster is gone (redis-py's cluster client raises
``RedisClusterUnreachableError``, not a ``RedisError``): the request falls back to local admission as
DESIGN.md says, logged and counted, and its ticket leaves the shared queue. The shared queue is the test
run's Redis Cluster; the waiters' blocking pool points at a cluster address where nothing listens (the
cluster gone between the queueing and the wait)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.admission.base import Ticket
from gateway.admission.fallback import FallbackAdmission
from gateway.admission.local import LocalAdmission
from gateway.admission.presence import Presence
from gateway.admission.redis_queue import RedisAdmission
from gateway.metrics import GatewayMetrics
from gateway.redis_clients import blocking_client, fast_client
from llmgw_contract.redis_keys import RedisKeys
from testing.poll import until
from testing.procs import free_port
from tests.conftest import Topologies

MODEL = "m"


def ticket(rid: str) -> Ticket:
    return Ticket(rid, MODEL, "t", 0, 10, 10.0, 100)


async def test_a_waiter_whose_blocking_read_fails_falls_back_logged_counted_and_leaves_the_queue(
    topologies: Topologies, keys: RedisKeys, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    url = topologies.get("cluster").url
    redis, metrics = fast_client(url, 0.5), GatewayMetrics()
    gone = blocking_client(f"redis+cluster://127.0.0.1:{free_port()}", 0.3, 8)
    shared = RedisAdmission(redis, gone, keys, "gw", 5.0, metrics, io_timeout_s=0.5)
    adm = FallbackAdmission(shared, LocalAdmission(), Presence(redis, keys, "gw", 1.0), metrics, 0.1)
    await adm.start()
    try:
        holder, _ = await adm.acquire(ticket("holder"), 1)  # the model's one shared slot
        lease, _ = await asyncio.wait_for(adm.acquire(ticket("waiter"), 1), 5)  # queued, then its read fails
        assert "request_id=waiter model=m shared queue failed" in caplog.text
        fallbacks = metrics.registry.get_sample_value("llmgw_admission_fallbacks_total", {"model": MODEL})
        assert fallbacks == 1

        async def queue_left() -> bool:
            return (
                await redis.zcard(keys.queue(MODEL)) == 0 and await redis.hlen(keys.waiter_meta(MODEL)) == 0
            )

        await until(queue_left, 5, "the waiter's ticket gone from the shared queue")
        await lease.release()
        await holder.release()
    finally:
        await adm.stop()
