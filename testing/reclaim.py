"""A gateway killed -9 with requests queued, and how long another gateway's requests then wait (issue 28's
"granted within 3 s"); shared by tests/gateway/admission/test_presence_renewal.py,
tests/gateway/admission/test_restart_same_id.py and bench/redis_reclaim.py.

One model at capacity 2 (one FAKE ENGINE replica that answers after 30 s, so slots stay held), a real
``llmgw-gateway`` process (default settings: 1 s beat, 15 s leases) running 2 requests and queueing 10.
:func:`killed_gateway_reclaim`: the other gateway's admission (as ``build_admission`` makes it: the
renewing thread on) queues 2 behind them, the process is killed -9, and the time from the kill until both
are granted is returned. :func:`restarted_gateway_wait`: the process is killed -9 and its successor starts
(under the dead one's gateway id, as compose, the stack keeper and Kubernetes restart it, or a fresh one)
and asks for 2 slots; the time from the kill until both are granted is returned.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import httpx

from gateway.admission.base import Ticket
from gateway.admission.redis_queue import RedisAdmission
from gateway.redis_clients import blocking_client, fast_client, presence_client
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from testing.gateway import fleet_yaml, register, wait_ready
from testing.poll import until
from testing.procs import Proc, free_port, spawn

MODEL, CAPACITY, RUNNING, QUEUED = "m", 2, 2, 10
DOOMED = "doomed"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def admission(url: str, keys: RedisKeys, gateway_id: str, beat_s: float = 1.0) -> RedisAdmission:
    """A gateway's admission as build_admission makes it (15 s leases, the renewing thread on)."""
    return RedisAdmission(
        fast_client(url, 1.0), blocking_client(url, 1.0, 32), keys, gateway_id, 15.0,
        io_timeout_s=1.0, beat_s=beat_s, presence=lambda: presence_client(url, 1.0),
    )  # fmt: skip


def spawn_gateway(tmp: Path, url: str, keys: RedisKeys, gateway_id: str = DOOMED) -> Proc:
    fleet_file = tmp / "fleet.yaml"
    model = {"name": MODEL, "source": {"path": "/nonexistent"}, "policy": "round_robin"}
    fleet_file.write_text(fleet_yaml([model]))
    env = {
        "LLMGW_FLEET_FILE": str(fleet_file),
        "LLMGW_REDIS_URL": url,
        "LLMGW_REDIS_PREFIX": keys.prefix,
        "LLMGW_REGISTRY_POLL_S": "0.2",
        "LLMGW_GATEWAY_ID": gateway_id,
    }
    gateway = str(Path(sys.executable).parent / "llmgw-gateway")
    port = free_port()
    return spawn([gateway, "--port", str(port)], port, tmp / f"gateway-{keys.prefix}.log", env)


async def killed_gateway_reclaim(tmp: Path, url: str, keys: RedisKeys, engine_url: str) -> float:
    """Seconds from the kill -9 until the other gateway's 2 queued requests are granted."""
    return await _killed(tmp, url, keys, engine_url, None)


async def restarted_gateway_wait(
    tmp: Path, url: str, keys: RedisKeys, engine_url: str, successor_id: str = DOOMED
) -> float:
    """Seconds from the kill -9 until the 2 requests of its successor (started after the kill, with the
    gateway id ``successor_id``: by default the dead one's) are granted."""
    return await _killed(tmp, url, keys, engine_url, successor_id)


async def _killed(tmp: Path, url: str, keys: RedisKeys, engine_url: str, successor_id: str | None) -> float:
    await register(url, keys.prefix, MODEL, engine_url, "r0", concurrency=CAPACITY)
    proc = spawn_gateway(tmp, url, keys, DOOMED)
    other = admission(url, keys, successor_id or "other")
    client = connect(url, socket_timeout=2.0)

    async def queued(n: int) -> bool:
        return bool(await client.zcard(keys.queue(MODEL)) == n)

    tickets = [Ticket(f"o{i}", MODEL, "t", 0, 1, 30.0, 100) for i in range(2)]
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            await wait_ready(http, proc.url, deadline_s=30)
            chat = f"{proc.url}/v1/chat/completions"
            hung = [asyncio.create_task(http.post(chat, json=BODY)) for _ in range(RUNNING + QUEUED)]
            await until(
                lambda: queued(QUEUED), 20, f"{RUNNING} running and {QUEUED} queued on the doomed one"
            )
            if successor_id is None:  # the other gateway, there all along: queued behind them
                await other.start()
                waiting = [asyncio.create_task(other.acquire(t, CAPACITY)) for t in tickets]
                await until(lambda: queued(QUEUED + 2), 10, "the other gateway's 2 queued behind them")
            os.killpg(proc.popen.pid, signal.SIGKILL)
            killed = time.monotonic()
            if successor_id is not None:  # its successor starts once it is dead
                await other.start()
                waiting = [asyncio.create_task(other.acquire(t, CAPACITY)) for t in tickets]
            leases = await asyncio.gather(*waiting)
            took = time.monotonic() - killed
            for lease, _ in leases:
                await lease.release()
            for task in hung:
                task.cancel()
            await asyncio.gather(*hung, return_exceptions=True)
            if await client.hlen(keys.waiter_meta(MODEL)):
                raise AssertionError("the killed gateway's waiters were not dropped")
            return took
    finally:
        proc.stop()
        await other.stop()
        await client.aclose()
