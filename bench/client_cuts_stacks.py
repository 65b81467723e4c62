"""What bench/client_cuts.py cuts through: several gateways in front of one Redis and two replicas, and
the replicas' own count of the generations they ran.

- ``fake``: a Redis server, one FAKE ENGINE process serving two engines (20 ms a token, its requests
  logged as vLLM's ``--enable-log-requests`` does), and the gateways in this process (uvicorn, as the
  tests run them); the count is the engines' ``/stats`` ``started``: every generation begun, one cut
  short included.
- ``vllm``: the stack of llmgw_tools/stack (Redis, the supervisor, the gateways) with the default fleet's
  SmolLM2 alone, two vLLM CPU replicas, one prompt for every trial; the count is the larger of vLLM's
  ``vllm:request_success_total`` (every ``finished_reason``; a generation its client aborted is not
  counted there) and ``vllm:prompt_tokens_total`` over the prompt's length (vLLM's ``/tokenize``): the
  prefills, an aborted generation's too once its first token came), both summed over the replicas.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.client_cuts import PROMPTS, Setup
from llmgw_contract.vllm_metrics import running_and_waiting
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import free_port, free_port_run, start_fake_engine, start_redis

SUCCESS = re.compile(rb"^vllm:request_success_total\{[^}]*\}\s+([0-9.eE+-]+)$", re.M)
PROMPT_TOKENS = re.compile(rb"^vllm:prompt_tokens_total\{[^}]*\}\s+([0-9.eE+-]+)$", re.M)
VLLM_PORTS = (18500, 18501)  # bench.migration_check.cpu_fleet's


@dataclass(frozen=True)
class FakeCounts:
    """The FAKE ENGINEs' own counts (``/stats``): the generations begun under a request id (the gateway
    passes on ``<id>-<12 hex digits>``), summed over ``urls``."""

    client: httpx.AsyncClient
    urls: list[str]

    async def runs(self, rid: str) -> int:
        total = 0
        for url in self.urls:
            gens = (await self.client.get(f"{url}/stats")).json()["generations"]
            total += sum(int(n) for k, n in gens.items() if k == rid or k.startswith(f"{rid}-"))
        return total

    async def began(self, rid: str) -> bool:
        return await self.runs(rid) > 0


@contextlib.asynccontextmanager
async def fake_setup(
    gateways: int, max_tokens: int, tmp: Path | None = None, grace_s: float = 30.0
) -> AsyncIterator[Setup]:
    """``gateways`` in-process gateways, one Redis, two FAKE ENGINEs; their log is ``Setup.logs``."""
    async with AsyncExitStack() as stack:
        if tmp is None:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llmgw-cuts-")))
        redis = start_redis(tmp)
        stack.callback(redis.stop)
        port = free_port_run(2)
        engine = start_fake_engine(
            tmp, "--ports", "2", "--delay-ms", "20", "--enable-log-requests", port=port
        )
        stack.callback(engine.stop)
        urls = [f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"]
        redis_url, prefix = f"redis://127.0.0.1:{redis.port}/0", "cuts"
        for i, url in enumerate(urls):
            await register(redis_url, prefix, "m", url, f"m-{i}")
        fleet = fleet_yaml([{"name": "m", "source": {"path": "/x"}, "stream_grace_s": grace_s}])
        gws = [
            await stack.enter_async_context(
                serve_gateway(tmp, fleet, redis_url, prefix, gateway_id=f"gw{i}", health_interval_s=60)
            )
            for i in range(gateways)
        ]
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=5.0))

        counts = FakeCounts(client, urls)
        yield Setup(gws, "m", counts.runs, counts.began, max_tokens, logs=[engine.log])


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"} if key else {}


async def in_engines(client: httpx.AsyncClient, urls: list[str], key: str = "") -> int:
    """The requests in the engines' batches and queues, summed (vLLM's gauges; the FAKE ENGINE's too)."""
    total = 0
    for url in urls:
        text = (await client.get(f"{url}/metrics", headers=bearer(key))).content
        total += sum(running_and_waiting(text))
    return total


async def vllm_runs(client: httpx.AsyncClient, urls: list[str], key: str, prompt_len: int) -> int:
    """The generations vLLM ran, summed over ``urls``: finished (``vllm:request_success_total``, every
    finish reason) or prefilled (``vllm:prompt_tokens_total`` / ``prompt_len``), whichever is more."""
    done = prefilled = 0.0
    for url in urls:
        text = (await client.get(f"{url}/metrics", headers=bearer(key))).content
        done += sum(float(v) for v in SUCCESS.findall(text))
        prefilled += sum(float(v) for v in PROMPT_TOKENS.findall(text))
    return max(round(done), round(prefilled / prompt_len))


async def prompt_tokens(client: httpx.AsyncClient, url: str, key: str, model: str, prompt: str) -> int:
    """A chat prompt's length in tokens, its template applied (vLLM's ``/tokenize``)."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}]}
    r = await client.post(f"{url}/tokenize", json=body, headers=bearer(key))
    r.raise_for_status()
    return int(r.json()["count"])


@contextlib.asynccontextmanager
async def vllm_setup(gateways: int, max_tokens: int) -> AsyncIterator[Setup]:
    """The stack with two SmolLM2 CPU replicas and ``gateways`` gateways (a minute or two to start)."""
    from bench.migration_check import cpu_fleet
    from llmgw_tools.stack.stack import Stack, StackConfig

    with tempfile.TemporaryDirectory(prefix="llmgw-cuts-") as tmp:
        config = StackConfig(
            fleet_file=cpu_fleet(Path(tmp)), run_dir=Path(tmp) / "run", redis_port=free_port(),
            keys_redis_port=free_port(), gateway_ports=tuple(free_port() for _ in range(gateways)),
            nginx_port=free_port(), prometheus_port=0, supervisor_metrics_port=free_port(),
            ready_deadline_s=900,
        )  # fmt: skip
        stack = Stack(config)
        try:
            await stack.up()
            urls = [f"http://127.0.0.1:{p}" for p in VLLM_PORTS]
            async with httpx.AsyncClient(timeout=5.0) as client:
                key, model = config.vllm_api_key, "smollm2-135m-instruct"
                length = await prompt_tokens(client, urls[0], key, model, PROMPTS[0])

                async def count(rid: str) -> int:
                    return await vllm_runs(client, urls, key, length)

                async def began(rid: str) -> bool:
                    return await in_engines(client, urls, key) > 0

                gws = [f"http://127.0.0.1:{p}" for p in config.gateway_ports]
                yield Setup(gws, model, count, began, max_tokens, prompts=PROMPTS[:1])
        finally:
            await stack.down()
