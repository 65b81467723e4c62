"""Every Redis key the project uses, in one place (gateway, supervisor and sidecar alike).

Per-model admission and prefix-index keys carry the model as a hash tag (``{model}``), so one model's
keys live in one Redis Cluster slot. The supervisor reads a model's demand from the same names the
gateways write: :meth:`RedisKeys.queue` (waiting requests) and :meth:`RedisKeys.leases` (running ones).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RedisKeys:
    """Key names under one prefix, so several stacks can share one Redis."""

    prefix: str = "llmgw"

    # replica registry (written by the supervisor, read by every gateway): one hash per model, and the
    # small per-cluster set of the models that have one (llmgw_contract/registry.py)
    def registry(self, model: str) -> str:
        return f"{self.prefix}:reg:{{{model}}}"

    @property
    def models(self) -> str:
        return f"{self.prefix}:models"

    # gateway presence (for local admission limits when Redis is lost): one small stamp set
    @property
    def gateways(self) -> str:
        return f"{self.prefix}:gateways"

    # in-flight requests per replica of one model, one field per gateway (gateway/replicas/inflight.py)
    def inflight(self, model: str) -> str:
        return f"{self.prefix}:inflight:{{{model}}}"

    # the shared prefix index (gateway/routing/shared_index.py), one model per hash tag
    def prefix_holders(self, model: str) -> str:
        return f"{self.prefix}:px:{{{model}}}:holders"

    def prefix_instances(self, model: str) -> str:
        return f"{self.prefix}:px:{{{model}}}:instances"

    def prefix_clock(self, model: str) -> str:
        return f"{self.prefix}:px:{{{model}}}:clock"

    def prefix_recent(self, model: str) -> str:
        """The replicas of the model's last picks, latest first (the share bound's window)."""
        return f"{self.prefix}:px:{{{model}}}:recent"

    def prefix_lru(self, model: str, replica_id: str) -> str:
        """One replica's keys by last use; with ``replica_id=""`` the prefix the scripts append ids to."""
        return f"{self.prefix}:px:{{{model}}}:lru:{replica_id}"

    def prefix_kv(self, model: str, replica_id: str) -> str:
        """What one replica's engine holds (a set of chain keys, from its KV events:
        llmgw_contract/kv_feed.py);
        with ``replica_id=""`` the prefix the scripts append ids to."""
        return f"{self.prefix}:px:{{{model}}}:kv:{replica_id}"

    def prefix_session(self, model: str, session_digest: str) -> str:
        return f"{self.prefix}:px:{{{model}}}:session:{session_digest}"

    def prefix_index_pattern(self, model: str) -> str:
        """Every key of one model's prefix index (a SCAN pattern: ``[`` escapes the hash tag's braces)."""
        return f"{self.prefix}:px:[{{]{model}[}}]:*"

    # admission (leases, queue, wake-up lists)
    def leases(self, model: str) -> str:
        return f"{self.prefix}:adm:{{{model}}}:leases"

    def capacity(self, model: str) -> str:
        return f"{self.prefix}:adm:{{{model}}}:capacity"

    def queue(self, model: str) -> str:
        return f"{self.prefix}:adm:{{{model}}}:queue"

    def tenant_usage(self, model: str) -> str:
        return f"{self.prefix}:adm:{{{model}}}:usage"

    def waiter_meta(self, model: str) -> str:
        return f"{self.prefix}:adm:{{{model}}}:waiters"

    def wake(self, model: str, ticket: str) -> str:
        return f"{self.prefix}:adm:{{{model}}}:wake:{ticket}"

    def alive(self, model: str) -> str:
        """Gateway id -> presence stamp (expiry ms) of the gateways queueing for the model: a waiter is
        granted only while its gateway's stamp holds."""
        return f"{self.prefix}:adm:{{{model}}}:alive"

    def waiting_since(self, model: str) -> str:
        """When (Redis ms) a request was first seen waiting for the model while nothing ran: stamped and
        dropped by the demand read (llmgw_contract/demand.py), which KEDA's scaler serves."""
        return f"{self.prefix}:adm:{{{model}}}:waiting_since"

    def cold_starts(self, model: str) -> str:
        """HASH: the model's measured cold starts (llmgw_contract/cold_starts.py): ``<device kind>`` ->
        seconds (a moving average), ``last`` -> the device kind measured last. Written when a replica is ready
        after a start from nothing; the gateway's ETA for a request held at zero."""
        return f"{self.prefix}:adm:{{{model}}}:cold_starts"

    def seq(self, model: str) -> str:
        return f"{self.prefix}:adm:{{{model}}}:seq"

    def gone(self, model: str, ticket: str) -> str:
        """A tombstone left by a cancelled acquire, so a late acquire of the same ticket does nothing."""
        return f"{self.prefix}:adm:{{{model}}}:gone:{ticket}"

    # response affinity: which replica holds a stored Responses-API response (gateway/affinity.py)
    def response(self, model: str, response_id: str) -> str:
        return f"{self.prefix}:resp:{{{model}}}:{response_id}"

    # idempotency keys (gateway/idempotency): one record per tenant and key (its digest), under the
    # tenant's hash tag: the body's fingerprint, the request that claimed it, then its stored answer
    def idempotency(self, tenant: str, key_digest: str) -> str:
        return f"{self.prefix}:idem:{{{tenant}}}:{key_digest}"

    def idempotency_events(self, tenant: str, key_digest: str) -> str:
        """A keyed stream's events as relayed (a Redis stream, entry ``0-<n>`` for SSE id ``n``)."""
        return f"{self.prefix}:idem:{{{tenant}}}:{key_digest}:events"

    # background Responses (gateway/responses_api/background.py): one record per tenant and response id,
    # under the tenant's hash tag: its status and response object, its events, and its runner's heartbeat
    def background(self, tenant: str, response_id: str) -> str:
        return f"{self.prefix}:bg:{{{tenant}}}:{response_id}"

    def background_events(self, tenant: str, response_id: str) -> str:
        """A background response's events (a Redis stream, entry ``0-<n+1>`` for sequence number n)."""
        return f"{self.prefix}:bg:{{{tenant}}}:{response_id}:events"

    def background_run(self, tenant: str, response_id: str) -> str:
        """Present while a gateway runs the response (renewed by it; gone: the gateway was lost)."""
        return f"{self.prefix}:bg:{{{tenant}}}:{response_id}:run"

    # LoRA adapters loaded at run time through the gateway's admin API (gateway/lora.py)
    def lora(self, model: str) -> str:
        return f"{self.prefix}:lora:{{{model}}}"

    # models on demand: one wake request per model (SET NX by the first gateway that sees demand, read
    # and cleared by the supervisor), and the channel on which a model's state change is announced
    def wake_request(self, model: str) -> str:
        return f"{self.prefix}:adm:{{{model}}}:wake_request"

    @property
    def state_channel(self) -> str:
        """Pub/sub: the supervisor publishes a model's name here the moment a woken replica is ready, and
        when one starts to drain for sleep; every gateway re-reads the registry at once."""
        return f"{self.prefix}:model_state"

    # API keys and rate limits. A key's record and the index share the hash tag ``{apikeys}``, so creating
    # or revoking a key (record and index entry in one MULTI) touches one Redis Cluster slot
    def api_key(self, key_hash: str) -> str:
        return f"{self.prefix}:{{apikeys}}:{key_hash}"

    def api_key_index(self) -> str:
        return f"{self.prefix}:{{apikeys}}"

    @property
    def api_key_changes(self) -> str:
        """Pub/sub on the key store: a key's hash is published here when it is revoked or replaced; every
        gateway drops its cached keys at once (gateway/auth/key_changes.py)."""
        return f"{self.prefix}:api_key_changes"

    def rate(self, key_hash: str) -> str:
        """One key's rate-limit counters: a hash of ``rpm:<window>`` and ``tpm:<window>`` (the window
        from Redis' own clock), under the key's hash tag."""
        return f"{self.prefix}:rate:{{{key_hash}}}"
