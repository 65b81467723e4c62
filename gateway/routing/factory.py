"""The one policy factory of a gateway: the same options at start and on every fleet reload."""

from __future__ import annotations

from gateway.routing.base import Policy, PolicyOptions
from gateway.routing.prefix.shared_index import SharedIndex
from gateway.routing.registry import build_policy
from gateway.settings import GatewaySettings
from llmgw_contract.fleet import Model


class PolicyFactory:
    """Builds a model's routing policy: the model's own ε from the fleet file, else the gateway's
    ``LLMGW_PREFIX_EPSILON``; the shared prefix index (None with ``LLMGW_PREFIX_INDEX=false``), its bounds
    and its chunking. :func:`gateway.app.build_gateway` and the fleet reload both call it."""

    def __init__(self, settings: GatewaySettings, index: SharedIndex | None) -> None:
        self.settings, self.index = settings, index

    def options(self, model: Model) -> PolicyOptions:
        s = self.settings
        return PolicyOptions(
            epsilon=s.prefix_epsilon if model.epsilon is None else model.epsilon,
            inflight_epsilon=s.prefix_inflight_epsilon,
            share_window=s.prefix_share_window,
            model=model.name,
            index=self.index,
            chunk_bytes=s.prefix_chunk_bytes,
            max_chunks=s.prefix_max_chunks,
            kv_tokens=s.prefix_index_kv_tokens,
            bytes_per_token=s.prefix_bytes_per_token,
        )

    def __call__(self, model: Model) -> Policy:
        return build_policy(model.policy, self.options(model))
