"""Where a replica's vLLM publishes its KV events and serves their replay (``--kv-events-config``): the
endpoints alone, without ZMQ, so that the launchers, the renderers and the registration sidecar's options
read them without the ``workers`` extra (:mod:`llmgw_contract.kv_feed` reads the events)."""

from __future__ import annotations

import json
from dataclasses import dataclass

KV_EVENTS_PORT, KV_REPLAY_PORT = 5557, 5558
"""The ports of a containerised replica's KV events and their replay (vLLM's default event port)."""


@dataclass(frozen=True, slots=True)
class KvEndpoints:
    """Where a replica publishes its events and serves their replay (vLLM binds both: ipc paths)."""

    events: str
    replay: str

    @classmethod
    def for_port(cls, port: int, run_dir: str = "/tmp") -> KvEndpoints:
        """The supervisor's endpoints for the replica serving ``port`` (unique per host)."""
        return cls(f"ipc://{run_dir}/llmgw-kv-{port}.pub", f"ipc://{run_dir}/llmgw-kv-{port}.replay")

    @classmethod
    def tcp(cls, host: str) -> KvEndpoints:
        """A container's endpoints: vLLM binds ``tcp("*")`` (every interface: vLLM connects, instead of
        binding, a PUB endpoint that names a host), its agent connects to ``tcp(host)``, where ``host``
        is the pod's loopback (Kubernetes: same pod) or the vLLM service's name (compose)."""
        return cls(f"tcp://{host}:{KV_EVENTS_PORT}", f"tcp://{host}:{KV_REPLAY_PORT}")

    def engine_config(self) -> str:
        """vLLM's ``--kv-events-config`` value."""
        conf = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": self.events}
        return json.dumps({**conf, "replay_endpoint": self.replay})
