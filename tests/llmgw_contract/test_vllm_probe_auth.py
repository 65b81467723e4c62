"""The managing agents' probes send vLLM's API key (VLLM_API_KEY, the variable vLLM itself reads): a
replica started with a key is seen serving only with it. Against the FAKE ENGINE with --api-key."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmgw_contract.vllm_probe import listed, probe_client
from testing.procs import Proc, start_fake_engine

KEY = "k" * 32


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"), "--model", "m", "--api-key", KEY)
    yield proc
    proc.stop()


async def test_probe_with_the_key_sees_the_model(engine: Proc) -> None:
    async with probe_client({"VLLM_API_KEY": KEY}) as client:
        assert await listed(client, engine.url, "m")


async def test_probe_without_the_key_is_refused(engine: Proc) -> None:
    async with probe_client({}) as client:
        assert not await listed(client, engine.url, "m")
    async with probe_client({"VLLM_API_KEY": "wrong" * 8}) as client:
        assert not await listed(client, engine.url, "m")
