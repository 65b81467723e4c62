"""A real gateway (uvicorn, in this test's event loop) in front of real replicas registered in real Redis."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from gateway.app import create_app
from gateway.edge.one_write import door_protocol
from gateway.settings import GatewaySettings
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from llmgw_contract.registry import ReplicaRecord, ReplicaState, publish
from testing.poll import until
from testing.procs import free_port


def fleet_yaml(models: list[dict[str, Any]]) -> str:
    import yaml

    return yaml.safe_dump({"models": models})


async def register(
    redis_url: str,
    prefix: str,
    model: str,
    url: str,
    rid: str,
    concurrency: int = 8,
    state: ReplicaState = ReplicaState.READY,
    ttl_s: float = 60,
    instance: str = "",
) -> ReplicaRecord:
    """Publish a replica record the way the supervisor does."""
    rec = ReplicaRecord(id=rid, model=model, url=url, state=state, concurrency=concurrency, instance=instance)
    r = connect(redis_url)  # any URL form (one server, Sentinel, Cluster)
    assert await publish(r, RedisKeys(prefix), rec, ttl_s)
    await r.aclose()
    return rec


@contextlib.asynccontextmanager
async def serve_gateway(
    tmp: Path, fleet: str, redis_url: str, prefix: str, **settings: Any
) -> AsyncIterator[str]:
    """Run create_app() under uvicorn on a free port; yields its base URL once it answers."""
    async with serve_app(tmp, fleet, redis_url, prefix, **settings) as (url, _):
        yield url


@contextlib.asynccontextmanager
async def serve_app(
    tmp: Path, fleet: str, redis_url: str, prefix: str, **settings: Any
) -> AsyncIterator[tuple[str, FastAPI]]:
    """The same, yielding the app too (its ``state.gateway``, for tests that drive the gateway's parts)."""
    fleet_file = tmp / f"fleet-{prefix}.yaml"
    fleet_file.write_text(fleet)
    fast = {"registry_poll_s": 0.2, "health_interval_s": 0.2, "load_scrape_interval_s": 0.2}
    s = GatewaySettings(
        fleet_file=fleet_file, redis_url=redis_url, redis_prefix=prefix, **{**fast, **settings}
    )
    port = free_port()
    app = create_app(s)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            http=door_protocol(s),  # the protocol llmgw-gateway serves with (gateway/cli.py)
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=1,
        )
    )
    task = asyncio.create_task(server.serve())
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as c:
            await until(lambda: server.started, 4.0, "uvicorn started", interval_s=0.02)
            await wait_ready(c, url)
        yield url, app
    finally:
        server.should_exit = True
        await task


async def wait_ready(client: httpx.AsyncClient, url: str, deadline_s: float = 10.0) -> None:

    async def ready() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return (await client.get(f"{url}/ready")).status_code == 200
        return False

    await until(ready, deadline_s, f"gateway {url} ready")
