"""Prefix affinity (the default): keep a shared prompt prefix on one replica, within a load bound.

Two modes. With the shared prefix index (``options.index``, the gateway's default), :meth:`route` sends
the request's prefix chain, session key and candidates' loads to Redis, where one Lua script reads the
index, decides (:func:`gateway.routing.prefix.index.decide`: the session's replica, else the holder of
the longest cached prefix, each within two bounds of the form below: ε on the replica's share of the
model's last :func:`~gateway.routing.prefix.index.share_window` picks, ``options.inflight_epsilon`` on its
in-flight load; else the replica holding the fewest keys, then the least loaded, and the placement
follows) and records, so every gateway decides
alike from the same state. Without the index, or while Redis is unreachable (degraded, counted in
``llmgw_prefix_index_picks{outcome="degraded"}``), the pick is the stateless rendezvous ranking described
next, today's rule.

Ranking. The candidates are ranked by rendezvous (highest-random-weight) hashing of the request's
``prefix_key`` with each endpoint's ``id`` (BLAKE2b, see :mod:`gateway.routing.rendezvous`). The ranking is
deterministic across processes and hosts, so every gateway replica sends a prefix to the same replica,
the one likely to hold it in its KV cache, without sharing any state.

Acceptance. With ``n`` candidates of live loads ``load(c)`` (in flight plus waiting) and ``ε`` =
``options.epsilon`` (default 0.25), let the mean *including the new request* be::

    m = (Σ load(c) + 1) / n

The first replica ``r`` in the ranking with::

    load(r) + 1 <= ⌈(1 + ε) · m⌉        (equivalently, for integer loads: load(r) < (1 + ε) · m)

gets the request. The ceiling is what makes an idle pool (m = 1/n) always accept the first choice, so a
lone prefix is never scattered. The test is done in exact integer arithmetic (no float rounding). If no
replica qualifies, the least loaded one gets it (ties to the lowest id); in fact the least loaded replica
always qualifies (its load is at most Σ load / n < m), so that branch is only a safeguard.

Guarantee. The replica a request is placed on holds, counting that request::

    load(r) + 1 <= ⌈(1 + ε) · m⌉ < (1 + ε) · m + 1

i.e. **no replica ever exceeds (1 + ε) · mean + 1** as the result of a routing decision, where mean is the
candidates' mean load including the new request. A placement only raises the mean, so it never pushes any
*other* replica over the bound either: starting from any state within the bound, a run of arrivals keeps
every replica within it. (Departures elsewhere can later lower the mean under a replica that was within
the bound when it was chosen; no router can prevent that, but a replica with load >= (1 + ε) · m gets
no new request until departures bring it back under.) With ε = 0 the bound is the tightest possible: a
replica gets a request only if it would then hold at most ⌈m⌉.

An empty ``prefix_key`` (no usable prompt text) goes to the least loaded replica.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from gateway.replicas.table import Endpoint
from gateway.routing.base import Policy, PolicyOptions, RouteRequest
from gateway.routing.least_inflight import least_loaded_stable
from gateway.routing.prefix.index import PickInput, ReplicaView, bound_ratio, capacity_keys, share_window
from gateway.routing.rendezvous import rank


class PrefixAffinity(Policy):
    name = "prefix_affinity"
    reads_prompt = True

    def __init__(self, options: PolicyOptions) -> None:
        super().__init__(options)
        eps = options.epsilon
        if math.isnan(eps) or eps < 0:
            raise ValueError(f"prefix affinity needs epsilon >= 0, got {eps!r}")
        # (1 + ε) as an exact ratio p/q of integers; None when unbounded (ε = inf).
        self._ratio: tuple[int, int] | None = (
            None if math.isinf(eps) else (Fraction(1) + Fraction(eps)).as_integer_ratio()
        )
        self._inflight_ratio = bound_ratio(options.inflight_epsilon)
        self._share_ratio = bound_ratio(eps)

    def accepts(self, load: int, total: int, n: int) -> bool:
        """Whether a replica of ``load`` may take one more, with ``total`` load over ``n`` candidates.

        ``load < (1 + ε) · (total + 1) / n``, as ``load · q · n < p · (total + 1)`` with (1 + ε) = p / q.
        """
        if self._ratio is None:
            return True
        p, q = self._ratio
        return load * q * n < p * (total + 1)

    def pick(self, candidates: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        if not request.prefix_key:
            return least_loaded_stable(candidates)
        n = len(candidates)
        total = sum(e.load for e in candidates)
        for endpoint in rank(request.prefix_key, candidates):
            if self.accepts(endpoint.load, total, n):
                return endpoint
        return least_loaded_stable(candidates)

    def view(self, endpoint: Endpoint) -> ReplicaView:
        """A candidate as the index sees it: id, instance, live load, LRU capacity in chain keys and whether
        its agent feeds the index from its KV events (then its LRU keeps only placements not yet stored:
        as many as its concurrency's requests of ``max_chunks`` keys)."""
        o = self.options
        rec = endpoint.record
        if rec.kv_index == "exact":
            return ReplicaView(rec.id, rec.instance, endpoint.load, rec.concurrency * o.max_chunks, True)
        kv = endpoint.kv_tokens or o.kv_tokens
        capacity = capacity_keys(kv, o.chunk_bytes, o.bytes_per_token)
        return ReplicaView(rec.id, rec.instance, endpoint.load, capacity)

    async def route(self, candidates: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        """The shared index's decision (one Redis round trip), else the rendezvous :meth:`pick`."""
        index, model = self.options.index, self.options.model
        if index is None:
            return self.pick(candidates, request)
        views = tuple(self.view(e) for e in candidates)
        inp = PickInput(
            request.chain,
            views,
            self._inflight_ratio,
            request.session_key or None,
            self._share_ratio,
            share_window(self.options.share_window, len(views)),
            request.detour,
        )
        decision = await index.pick(model, inp)
        chosen = None if decision is None else next((e for e in candidates if e.id == decision.replica), None)
        if decision is None or chosen is None:
            index.count(model, "degraded")
            return self.pick(candidates, request)
        index.count(model, decision.outcome)
        return chosen
