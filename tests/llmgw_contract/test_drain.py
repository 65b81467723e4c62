"""The one drain (llmgw_contract/drain.py) against the FAKE ENGINE: a request the replica's API server holds
but its engine has not taken yet (vLLM tokenizes and applies the chat template first; on a loaded CPU that
takes seconds) is in flight too. vLLM counts it in ``/load`` (``--enable-server-load-tracking``), not in
``vllm:num_requests_running|waiting``; a drain that read only the engine stopped the replica under it
(a scale-down's 502s in CI)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator

import httpx
import pytest

from llmgw_contract.drain import drain_argv, wait_until_idle
from llmgw_contract.registry import RegistryTiming
from testing.procs import Proc, start_fake_engine

PREPROCESS_MS = 1500
TIMING = RegistryTiming(drain_settle_s=0.2, drain_grace_s=10, drain_poll_s=0.1)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("engine"), "--preprocess-ms", str(PREPROCESS_MS))
    yield proc
    proc.stop()


async def test_the_drain_waits_for_a_request_the_engine_has_not_taken_yet(engine: Proc) -> None:
    chat = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    async with httpx.AsyncClient(timeout=30) as client:
        sent = asyncio.create_task(client.post(f"{engine.url}/v1/chat/completions", json=chat))
        await asyncio.sleep(0.1)  # in the API server, not yet in the engine's counters
        assert await wait_until_idle(client, [engine.url], TIMING)
        assert sent.done(), "the drain ended while the request was still being served"
        assert (await sent).status_code == 200


async def test_the_prestop_script_waits_for_it_too(engine: Proc) -> None:
    """The vLLM container's preStop hook (``DRAIN_SCRIPT``, plain python3) reads ``/load`` the same way."""
    chat = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    async with httpx.AsyncClient(timeout=30) as client:
        sent = asyncio.create_task(client.post(f"{engine.url}/v1/chat/completions", json=chat))
        await asyncio.sleep(0.1)
        script = await asyncio.create_subprocess_exec(*drain_argv(sys.executable, engine.url, TIMING))
        assert await asyncio.wait_for(script.wait(), 15) == 0
        assert sent.done(), "the preStop drain ended while the request was still being served"
        assert (await sent).status_code == 200
