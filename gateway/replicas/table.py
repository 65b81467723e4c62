"""The live view of each model's replicas: one Endpoint per replica, one ModelPool per model.

The :class:`ReplicaTable` is the single owner of this state; the registry watcher replaces
records, the monitor updates scraped load and health, and the request path counts in-flight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gateway.replicas.progress import Gaps, Progress
from llmgw_contract.registry import ReplicaRecord, ReplicaState


@dataclass(eq=False, slots=True)
class Endpoint:
    record: ReplicaRecord
    inflight: int = 0
    waiting: int = 0
    running: int = 0
    inflight_at_scrape: int = 0
    shared_others: int | None = None
    ejected_until: float = 0.0
    failures: int = 0
    strikes: int = 0
    """Server errors answered in a row (gateway/replicas/ejection.py: a run of them ejects)."""
    probe_failures: int = 0
    """Health probes failed in a row (gateway/replicas/ejection.py: a run of them tells the watchers)."""
    process_gone: bool = False
    """The registry says this replica's process is gone: its record left, came back as a new instance,
    or was marked failed. Nothing it took can still run there."""
    kv_tokens: int = 0
    """The replica's KV cache in tokens (``vllm:cache_config_info``), 0 until scraped."""
    progress: Progress = field(default_factory=Progress)
    """What its own metrics and probes say of its progress (the stall evidence: replicas/progress.py)."""
    gaps: Gaps = field(default_factory=Gaps)
    """Its recent gaps between tokens (the stall bound is learned from them)."""
    watchers: set[Callable[[], None]] = field(default_factory=set)
    """Called on evidence about the work in flight there: its process is gone (:attr:`process_gone`), or
    it failed ``lost_after_probes`` health probes in a row. Requests that wait for its answer
    (gateway/pipeline/migrate.py ``ReplicaWatch``); one failed probe tells nobody."""

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def url(self) -> str:
        return self.record.url

    @property
    def others(self) -> int:
        """What the other gateways have in flight there: their own counts shared through Redis (at most
        one share interval old), or without that share, vLLM's running + waiting as of the last scrape
        less what was this gateway's own at that moment (never below zero)."""
        if self.shared_others is not None:
            return self.shared_others
        return max(0, self.running + self.waiting - self.inflight_at_scrape)

    @property
    def load(self) -> int:
        """Live load: in flight there from every gateway plus what vLLM reports waiting.

        In flight is this gateway's own count, always fresh, plus the other gateways' (:attr:`others`).
        Only the others' part is old: a gateway that took a second-old scraped total for its own as well
        kept sending to the replica that looked idle a second ago, and every gateway with it.
        """
        return self.inflight + self.others + self.waiting

    def gone(self) -> None:
        """Evidence about the work in flight there (see :attr:`watchers`): tell every request waiting."""
        for watcher in list(self.watchers):
            watcher()

    def ended(self) -> None:
        """The registry says its process is gone: marked so, and every request waiting on it told."""
        self.process_gone = True
        self.gone()

    @property
    def available(self) -> bool:
        """Routable and not ejected; an ejected replica returns only through a half-open probe."""
        return self.record.routable and self.failures == 0


MODEL_STATES = ("awake", "waking", "asleep", "unavailable")
"""A model's states as :attr:`ModelPool.state` names them (the ``llmgw_model_state`` series)."""


@dataclass(slots=True)
class ModelPool:
    model: str
    endpoints: list[Endpoint] = field(default_factory=list)

    def candidates(self, exclude: Sequence[Endpoint] = ()) -> list[Endpoint]:
        """The replicas a request may go to: the available ones; when none is available but some are
        routable (all ejected), every routable one. Ejection is a guess from one failure or one slow
        health check (a busy CPU host), and while its back-off runs every request would get a 503 at
        once; tried instead, a replica that is really down fails fast (refused) and the retry moves on."""
        usable = [e for e in self.endpoints if e.available] or [
            e for e in self.endpoints if e.record.routable
        ]
        return [e for e in usable if e not in exclude]

    @property
    def ready_count(self) -> int:
        return sum(1 for e in self.endpoints if e.available)

    @property
    def capacity(self) -> int:
        return sum(e.record.concurrency for e in self.endpoints if e.record.routable)

    @property
    def state(self) -> str:
        """What /v1/models and /ready say of the model (one of :data:`MODEL_STATES`): awake (a replica
        takes requests), waking (one is starting), asleep (stopped until a request wakes it), or
        unavailable (none of these)."""
        if self.ready_count:
            return "awake"
        states = {e.record.state for e in self.endpoints}
        if states & {ReplicaState.WAKING, ReplicaState.STARTING}:
            return "waking"
        if ReplicaState.ASLEEP in states:
            return "asleep"
        return "unavailable"


class ReplicaTable:
    """Every model's pool, keyed by the model's canonical name."""

    def __init__(self, models: Iterable[str]) -> None:
        self._pools = {m: ModelPool(m) for m in models}

    def set_models(self, models: Iterable[str]) -> None:
        """Follow a reloaded fleet: a pool for each new model, none for a removed one (requests in flight
        keep the pool they hold); the pools of the models kept are untouched."""
        wanted = list(models)
        self._pools = {m: self._pools.get(m) or ModelPool(m) for m in wanted}

    def pool(self, model: str) -> ModelPool:
        return self._pools[model]

    def find(self, model: str) -> ModelPool | None:
        """The model's pool, or None once a fleet reload removed the model."""
        return self._pools.get(model)

    def pools(self) -> Sequence[ModelPool]:
        return list(self._pools.values())

    def endpoints(self) -> list[Endpoint]:
        return [e for p in self._pools.values() for e in p.endpoints]

    def sync(self, model: str, records: Iterable[ReplicaRecord]) -> bool:
        """Replace a model's records, keeping each surviving replica's live counters (same id and same
        instance; a restarted replica starts afresh, its ejection forgotten). A replica that left, came
        back as a new instance or was marked failed has :meth:`Endpoint.ended`. True if changed."""
        pool = self._pools[model]
        old = {e.id: e for e in pool.endpoints}
        new: list[Endpoint] = []
        for rec in sorted(records, key=lambda r: r.id):
            ep = old.get(rec.id)
            if ep is None or ep.record.instance != rec.instance:
                ep = Endpoint(rec)  # a new start of the replica: nothing of the old one carries over
            else:
                failed = rec.state is ReplicaState.FAILED and ep.record.state is not ReplicaState.FAILED
                ep.record = rec
                if failed:
                    ep.ended()
            new.append(ep)
        changed = [e.record for e in new] != [e.record for e in pool.endpoints]
        kept = {id(e) for e in new}
        left = [e for e in pool.endpoints if id(e) not in kept]
        pool.endpoints = new
        for ep in left:
            ep.ended()
        return changed
