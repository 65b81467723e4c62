"""Which credential each replica gets: the workers' key (``LLMGW_VLLM_API_KEY``) goes only to the
supervised replicas; each external endpoint (a model's ``endpoints:``) gets its own, read from the
environment variable or the file the fleet file names, or none with ``auth: none``. Never the workers'
key to a server the fleet lists by URL.

Keys are read when the fleet is loaded (and reloaded); a named variable or file that is missing or
empty is a clear error then, not a 401 on the request path.
"""

from __future__ import annotations

import os
from pathlib import Path

from gateway.replicas.table import Endpoint
from gateway.settings import GatewaySettings
from llmgw_contract.fleet import ExternalEndpoint, Fleet

Headers = list[tuple[bytes, bytes]]


class CredentialError(ValueError):
    """A key the fleet file names cannot be read."""


def bearer(key: str) -> Headers:
    return [(b"authorization", f"Bearer {key}".encode("latin-1"))] if key else []


def endpoint_key(model: str, e: ExternalEndpoint) -> str:
    """The key an external endpoint names ("" for ``auth: none``)."""
    if e.auth == "none":
        return ""
    if e.api_key_env is not None:
        key = os.environ.get(e.api_key_env, "").strip()
        where = f"environment variable {e.api_key_env}"
    else:
        assert e.api_key_file is not None
        try:
            key = Path(e.api_key_file).read_text().strip()
        except OSError as exc:
            raise CredentialError(
                f"model {model} endpoint {e.url}: cannot read {e.api_key_file}: {exc}"
            ) from exc
        where = f"file {e.api_key_file}"
    if not key:
        raise CredentialError(f"model {model} endpoint {e.url}: its key ({where}) is missing or empty")
    return key


def credentials_for(settings: GatewaySettings, fleet: Fleet) -> Credentials:
    """The workers' key (vLLM's --api-key on the supervised replicas) and each endpoint's own."""
    return Credentials(fleet, settings.vllm_api_key.get_secret_value() if settings.vllm_api_key else "")


class Credentials:
    """The Authorization header for each replica, as raw header pairs (the request path) or a dict
    (httpx: health, metrics, model list, LoRA admin)."""

    def __init__(self, fleet: Fleet, workers_key: str) -> None:
        self.workers = bearer(workers_key)
        self.external_models = {m.name for m in fleet.models if not m.managed}
        self.external = {
            e.url.rstrip("/"): bearer(endpoint_key(m.name, e)) for m in fleet.models for e in m.endpoints
        }

    def upstream(self, ep: Endpoint) -> Headers:
        """What ``ep`` gets: its own key when the fleet lists it by URL (none if unknown), else the
        workers' key."""
        if ep.record.model in self.external_models or ep.url in self.external:
            return self.external.get(ep.url, [])
        return self.workers

    def http(self, ep: Endpoint) -> dict[str, str]:
        return {k.decode(): v.decode("latin-1") for k, v in self.upstream(ep)}
