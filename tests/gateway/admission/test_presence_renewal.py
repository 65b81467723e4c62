"""Reclaim within 3 s without losing a stalled gateway's slots, on each topology (one server, Sentinel,
Cluster): the admission presence stamps are renewed by a thread on its own synchronous client while the
event loop makes progress (gateway/admission/liveness.py).

- A gateway process killed -9 with 10 requests queued: the other gateway's queued requests are granted
  within the design's bound (1.5 beats + a beat, 2.5 s at the default 1 s beat; asserted under 4 s, which
  the four-beat stamps of before could not meet); the measured time is printed (``-s``).
- A gateway whose event loop is blocked 3 s (a synchronous sleep) keeps its leases through the other
  gateway's beats (its stamps alone hold 1.5 s).
- A gateway whose loop stays blocked past 4 + 1.5 beats loses them to the other gateway's beat.

The stalled gateway runs on its own event loop in a thread of the test, so the other gateway's loop goes on.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from gateway.admission.base import Ticket
from gateway.admission.liveness import StampTiming
from gateway.admission.stamp_renewer import StampRenewer
from gateway.periodic import Background
from gateway.redis_clients import presence_client
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from llmgw_tools.stack.redis_topology import KINDS
from testing.poll import until
from testing.procs import Proc, free_port, start_fake_engine
from testing.reclaim import MODEL, admission, killed_gateway_reclaim
from tests.conftest import Topologies

T = TypeVar("T")


@pytest.fixture(params=KINDS)
def url(request: pytest.FixtureRequest, topologies: Topologies) -> str:
    return topologies.get(str(request.param)).url


@pytest.fixture
def keys() -> RedisKeys:
    return RedisKeys(f"pr{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def slow_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("slow"), "--latency-ms", "30000")
    yield proc
    proc.stop()


def ticket(rid: str, wait_s: float = 30.0) -> Ticket:
    return Ticket(rid, MODEL, "t", 0, 1, wait_s, 100)


class LoopThread:
    """An event loop of its own in a thread: a gateway whose loop the test can block."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def block(self, seconds: float) -> None:
        """Block the loop with a synchronous sleep (as a CPU-bound step or a blocking call would)."""
        self.loop.call_soon_threadsafe(time.sleep, seconds)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
async def stalled_side() -> AsyncIterator[LoopThread]:
    side = LoopThread()
    yield side
    side.close()


async def leases_of(url: str, keys: RedisKeys, owner: str) -> int:
    client = connect(url, socket_timeout=2.0)
    try:
        members = await client.zrange(keys.leases(MODEL), 0, -1)
    finally:
        await client.aclose()
    return sum(1 for m in members if m.decode().startswith(f"{owner}/"))  # "<gateway id>/<nonce>:<token>"


async def test_a_stalled_event_loop_keeps_its_leases(
    url: str, keys: RedisKeys, stalled_side: LoopThread
) -> None:
    stalled = admission(url, keys, "stalled")
    other = admission(url, keys, "other")
    await stalled_side.run(stalled.start())
    await other.start()
    await other.resize(MODEL, 2)  # the other gateway beats (and sweeps) for the model too
    try:
        for i in range(2):
            await stalled_side.run(stalled.acquire(ticket(f"s{i}"), 2))
        stalled_side.block(3.0)
        blocked = time.monotonic()
        while time.monotonic() - blocked < 3.0:  # the other gateway beats (and sweeps) meanwhile
            await other.beat()
            assert await leases_of(url, keys, "stalled") == 2
            await asyncio.sleep(0.25)
        await other.beat()
        assert await leases_of(url, keys, "stalled") == 2
        assert stalled.renewer is not None and stalled.renewer.renewals > 0
    finally:
        await other.stop()
        await stalled_side.run(stalled.stop())


async def test_a_hung_event_loop_loses_its_leases(
    url: str, keys: RedisKeys, stalled_side: LoopThread
) -> None:
    beat = 0.25  # hung after 4 beats (1 s); its stamps lapse 1.5 beats later
    hung = admission(url, keys, "hung", beat_s=beat)
    other = admission(url, keys, "other", beat_s=beat)
    await stalled_side.run(hung.start())
    await other.start()
    await other.resize(MODEL, 2)  # the other gateway beats (and sweeps) for the model too
    try:
        for i in range(2):
            await stalled_side.run(hung.acquire(ticket(f"h{i}"), 2))
        stalled_side.block(6.0)

        async def dropped() -> bool:
            return await leases_of(url, keys, "hung") == 0

        await until(dropped, 5.0, "a hung gateway's leases dropped by the other's beat")
        lease, _ = await other.acquire(ticket("o", wait_s=1.0), 2)  # its slots are free again
        await lease.release()
    finally:
        await other.stop()
        await stalled_side.run(hung.stop())


async def test_a_killed_gateways_queue_goes_to_the_other_gateway_within_the_bound(
    tmp_path: Path, url: str, keys: RedisKeys, slow_engine: Proc
) -> None:
    took = await killed_gateway_reclaim(tmp_path, url, keys, slow_engine.url)
    print(
        f"\n[{url.split(':')[0]}] a killed gateway's queue: the other's 2 requests granted {took:.2f} s after"
    )
    assert took < 4.0, took  # the design's bound is 2.5 s; the four-beat stamps of before took >= 4 s
    assert StampTiming(1.0).reclaim_bound_s() < 3.0


async def test_a_renewal_thread_without_redis_counts_its_failures_and_goes_on() -> None:
    # Nothing listens there: a cluster client cannot even be built (it connects at once); the gateway must
    # still start (the thread builds its client) and the thread counts each failed renewal and goes on.
    failures: list[str] = []
    url = f"redis+cluster://127.0.0.1:{free_port()}"
    renewer = StampRenewer(
        lambda: presence_client(url, 0.2), RedisKeys("x"), "g", StampTiming(0.1), failures.append
    )
    renewer.watch([MODEL])
    background = Background()
    renewer.start(background)
    try:
        await until(lambda: _true(len(failures) >= 3), 10, "three failed renewals counted")
        assert set(failures) == {"presence_renewal"}
        assert renewer.renewals == 0
    finally:
        await background.close()
        await renewer.close()


async def _true(value: bool) -> bool:
    return value
