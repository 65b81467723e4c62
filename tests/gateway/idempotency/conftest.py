"""Two real gateways (one Redis) in front of one FAKE ENGINE (6 tokens, 60 ms each), shared by this
folder's tests: ``m`` keeps a keyed stream 30 s for its client (the default), ``g`` 0.3 s, ``z`` not at
all (cancelled when its client leaves)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack

import pytest

from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import Proc, start_fake_engine

FLEET = fleet_yaml(
    [
        {"name": "m", "source": {"path": "/x"}, "policy": "round_robin"},
        {"name": "g", "source": {"path": "/x"}, "policy": "round_robin", "stream_grace_s": 0.3},
        {"name": "z", "source": {"path": "/x"}, "policy": "round_robin", "stream_grace_s": 0},
    ]
)


@pytest.fixture(scope="package")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("idem"), "--tokens", "6", "--delay-ms", "60")
    yield proc
    proc.stop()


@pytest.fixture(scope="package")
async def gateways(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, engine: Proc
) -> AsyncIterator[list[str]]:
    tmp_path, prefix = tmp_path_factory.mktemp("idem-gw"), f"i{uuid.uuid4().hex[:8]}"
    await register(redis_url, prefix, "m", engine.url, "m-0")
    await register(redis_url, prefix, "g", engine.url, "g-0")
    await register(redis_url, prefix, "z", engine.url, "z-0")
    async with AsyncExitStack() as stack:
        urls = [
            await stack.enter_async_context(
                serve_gateway(tmp_path, FLEET, redis_url, prefix, gateway_id=f"gw{i}", health_interval_s=60)
            )
            for i in range(2)
        ]
        yield urls
