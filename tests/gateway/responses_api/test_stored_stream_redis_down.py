"""A stored-response stream (Responses API, ``responses_store``) whose holder cannot be recorded because
Redis Cluster went away (every node killed -9 while the replica works on it: redis-py's cluster client
raises ``RedisClusterUnreachableError``, not a ``RedisError``): the stream is not cut. It ends complete (or,
had it broken, with its SSE error event). A real gateway over a private cluster and the FAKE ENGINE."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

import httpx

from llmgw_tools.stack.redis_topology import start
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import start_fake_engine

MODEL = "resp-model"
FLEET = fleet_yaml([{"name": MODEL, "source": {"path": "/nonexistent"}, "engine": {"responses_store": True}}])


async def test_a_stored_response_stream_is_not_cut_when_redis_cluster_goes_away(tmp_path: Path) -> None:
    cluster = await asyncio.to_thread(start, "cluster", tmp_path / "cluster")
    engine = start_fake_engine(tmp_path, "--model", MODEL, "--tokens", "1", "--delay-ms", "600")
    prefix = f"ss{uuid.uuid4().hex[:8]}"
    try:
        await register(cluster.url, prefix, MODEL, engine.url, f"{MODEL}-0", instance="first")
        async with (
            serve_gateway(tmp_path, FLEET, cluster.url, prefix, admission=False) as gw,
            httpx.AsyncClient(timeout=30) as http,
        ):
            body = {"model": MODEL, "input": "hi", "stream": True}

            async def read() -> list[str]:
                async with http.stream("POST", f"{gw}/v1/responses", json=body) as r:
                    assert r.status_code == 200
                    return [line async for line in r.aiter_lines() if line.startswith("data: ")]

            stream = asyncio.create_task(read())

            async def in_flight() -> bool:
                return '"inflight": 1' in (await http.get(f"{engine.url}/stats")).text

            await until(in_flight, 5, "the response in flight on the replica")
            for node in cluster.nodes:  # before its first event (0.6 s away): the holder cannot be recorded
                node.kill(signal.SIGKILL)
            events = await stream
        last = events[-1]
        assert '"response.completed"' in last or '"error"' in events[-2], events
    finally:
        engine.stop()
        cluster.stop()
