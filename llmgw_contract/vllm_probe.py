"""What a replica's managing agent asks a vLLM server: is it serving the model, is it still busy.

vLLM started with an API key (its ``--api-key``, or the ``VLLM_API_KEY`` variable it reads) refuses
``/v1/*`` without it; the managing agents (supervisor, registration sidecar) read the same variable and
send it on every probe (:func:`probe_client`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping

import httpx

from llmgw_contract.vllm_metrics import running_and_waiting

API_KEY_ENV = "VLLM_API_KEY"


def api_key_headers(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``Authorization: Bearer <VLLM_API_KEY>`` when the variable is set, else nothing."""
    key = (os.environ if env is None else env).get(API_KEY_ENV, "")
    return {"authorization": f"Bearer {key}"} if key else {}


def probe_client(env: Mapping[str, str] | None = None) -> httpx.AsyncClient:
    """The HTTP client a managing agent probes its vLLM servers with (the API key on every request)."""
    return httpx.AsyncClient(headers=api_key_headers(env))


async def listed(client: httpx.AsyncClient, url: str, served: str) -> bool:
    """True when /health answers 200 and /v1/models lists ``served``."""
    try:
        health = await client.get(f"{url}/health", timeout=2.0)
        if health.status_code != 200:
            return False
        models = await client.get(f"{url}/v1/models", timeout=2.0)
    except (httpx.HTTPError, OSError):
        return False
    return models.status_code == 200 and any(m.get("id") == served for m in models.json().get("data", []))


async def requests_in_engine(client: httpx.AsyncClient, url: str) -> int | None:
    """The requests the replica holds: vllm:num_requests_running + waiting, or more where vLLM's ``/load``
    (``--enable-server-load-tracking``, which the supervisor and the renderers pass) counts requests its
    API server holds that the engine has not taken yet (tokenizing, applying the chat template: seconds on
    a loaded CPU). None when ``/metrics`` does not answer (unknown, not idle); a server without ``/load``
    is read from ``/metrics`` alone."""
    try:
        r, load = await asyncio.gather(
            client.get(f"{url}/metrics", timeout=2.0), client.get(f"{url}/load", timeout=2.0)
        )
    except (httpx.HTTPError, OSError):
        return None
    if r.status_code != 200:
        return None
    running, waiting = running_and_waiting(r.content)
    return max(running + waiting, server_load(load))


def server_load(answer: httpx.Response) -> int:
    """``/load``'s ``server_load`` (0 where the server has none: no load tracking, or not vLLM)."""
    try:
        return int(answer.json().get("server_load", 0)) if answer.status_code == 200 else 0
    except (ValueError, AttributeError, TypeError):
        return 0
