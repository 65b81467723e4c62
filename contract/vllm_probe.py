"""What a replica's managing agent asks a vLLM server: is it serving the model, is it still busy."""

from __future__ import annotations

import httpx

from contract.vllm_metrics import running_and_waiting


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


async def requests_in_engine(client: httpx.AsyncClient, url: str) -> int:
    """vllm:num_requests_running + waiting, or 0 when the replica does not answer."""
    try:
        r = await client.get(f"{url}/metrics", timeout=2.0)
    except (httpx.HTTPError, OSError):
        return 0
    running, waiting = running_and_waiting(r.content)
    return running + waiting
