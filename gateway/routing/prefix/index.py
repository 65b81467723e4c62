"""The prefix index and its routing decision, as plain data and pure functions (no I/O).

This module is the reference: the Lua script of :mod:`gateway.routing.prefix.shared_index` does the same steps
in Redis, atomically, and a test runs both on the same inputs and compares them.

The index, per model:

- ``holders``: prefix-chain key (see :mod:`gateway.routing.prefix.chain`) -> the replicas that hold that
  prefix,
  the most recent placement first;
- ``lru``: per replica, the keys it holds with the clock value of their last use; a replica keeps at
  most its ``capacity`` keys, the least recently used (ties: the smallest key) dropped first;
- ``instances``: replica -> the instance id it had when it was last seen (``ReplicaRecord.instance``):
  a replica whose instance changed has restarted with an empty cache, and its entries are dropped;
- ``sessions``: session key -> the replica that served it last (in Redis with a TTL);
- ``clock``: a counter, one tick per recorded pick;
- ``recent``: the replicas of the model's last ``window`` picks, the latest first: each replica's count
  there is its *recent share* of the model's requests, the load that placement balances.

One pick (:meth:`PrefixIndex.pick`): drop the entries of restarted candidates, decide
(:func:`decide`), then record: the chosen replica goes first among every chain key's holders, its LRU
touches them all and drops what is over its capacity, the session (if any) points to it, and it enters
``recent``. A *detour* (``PickInput.detour``: a retry or a migration, away from the replica the request
was placed on) records only ``recent``.

Two bounds, both of :func:`accepts`'s form ``x < (1 + ε) · (Σ x + 1) / n``: the *share* bound on each
candidate's count in ``recent`` (ε = the model's ``epsilon``), which keeps every replica's share of the
model's recent requests near 1/n whatever the prefixes' popularity; and the *in-flight* bound on its
live load (ε = ``inflight_epsilon``, looser), which guards against a burst on one replica. A replica
*qualifies* when it passes both.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

Ratio = tuple[int, int]
"""(1 + ε) as p / q, with a denominator of at most 1000 (exact in Lua's doubles); q = 0: unbounded."""

BYTES_PER_TOKEN = 8
"""How many bytes of prompt text the index counts per KV-cache token when it sizes a replica's LRU bound
(the gateway's ``LLMGW_PREFIX_BYTES_PER_TOKEN``). Generous on purpose: English prose runs ~4-6 bytes a
SmolLM2 token, the benchmark's word lists 6.2, random-token prompts more. Too low and the index forgets
prefixes the replica still caches, and places them again as cold, maybe on the other replica (measured
on the H200: 63.6 % prefix-cache hits at 4 bytes a token); too high and it remembers a prefix the
replica has evicted, which costs the same prefill that a cold placement would."""


def bound_ratio(epsilon: float) -> Ratio:
    """(1 + ε) as a small exact ratio ``(p, q)``; ``(1, 0)`` for ε = inf (every replica accepts)."""
    if math.isnan(epsilon) or epsilon < 0:
        raise ValueError(f"the load bound needs epsilon >= 0, got {epsilon!r}")
    if math.isinf(epsilon):
        return (1, 0)
    r = (Fraction(1) + Fraction(epsilon)).limit_denominator(1000)
    return (r.numerator, r.denominator)


MAX_SHARE_WINDOW = 256
"""The most picks the share bound counts: the pick script counts its window on every pick (O(window) in
Redis: 135 µs a pick at 32 candidates and 256 picks, 266 µs at 1,024)."""


def share_window(per_replica: int, replicas: int) -> int:
    """The share bound's window: ``per_replica`` picks per candidate, at most :data:`MAX_SHARE_WINDOW`."""
    return max(1, min(per_replica * replicas, MAX_SHARE_WINDOW))


def capacity_keys(kv_tokens: int, chunk_bytes: int, bytes_per_token: int = BYTES_PER_TOKEN) -> int:
    """How many chain keys a replica keeps: its KV cache in tokens, at ``bytes_per_token`` bytes of
    prompt text a token, over the chunk size; at least 1."""
    return max(1, kv_tokens * bytes_per_token // max(1, chunk_bytes))


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """A candidate as the deciding gateway sees it."""

    id: str
    instance: str
    load: int
    capacity: int
    exact: bool = False
    """Its managing agent feeds the index from its KV events (exact mode): the agent, not the pick, follows
    its restarts, and its LRU holds only the placements its engine has not stored yet."""


@dataclass(frozen=True, slots=True)
class PickInput:
    """One pick's input: the chain, the candidates, the in-flight bound ``ratio``, the share bound
    ``share_ratio`` over the model's last ``window`` picks, and the session key (if any)."""

    chain: tuple[str, ...]
    replicas: tuple[ReplicaView, ...]
    ratio: Ratio
    session: str | None = None
    share_ratio: Ratio = (1, 0)
    window: int = 64
    detour: bool = False
    """A pick for a request that left the replica it was placed on (a retry after a refusal, a stream
    migrated off a stalled or broken replica; the candidates exclude the replicas tried): decided alike,
    but it places nothing: the prefix stays where it was placed, and neither its holders, the chosen
    replica's LRU nor the session move; only the recent picks count it. A detour that placed the prefix
    would make the replica it went to its first holder, and under cache pressure one stalled stream
    would keep a document on both replicas, each copy evicting others."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The chosen replica; ``outcome`` is ``session``, ``hit``, ``moved`` or ``cold``; ``depth`` is the
    number of chain keys of the longest prefix some candidate held (0: none)."""

    replica: str
    outcome: str
    depth: int


def accepts(load: int, total: int, n: int, ratio: Ratio) -> bool:
    """``load < (1 + ε) · (total + 1) / n`` in integers: the replica may take one more request."""
    p, q = ratio
    return load * q * n < p * (total + 1)


def tie_hash(tie: str, replica: str) -> str:
    """The tie-break among equally loaded replicas: SHA-1 of the prefix's first key and the id (hex)."""
    return hashlib.sha1((tie + "\0" + replica).encode()).hexdigest()  # a tie-break, not a secret


def least_loaded(
    replicas: Sequence[ReplicaView],
    tie: str,
    recent: Mapping[str, int],
    held: Mapping[str, int] | None = None,
) -> ReplicaView:
    """Where a new placement goes: the replica holding the fewest keys (``held``: its placements' LRU and,
    in exact mode, the keys its engine reported: the index's view of its cache), then the least loaded,
    then the smaller recent share, then :func:`tie_hash` (so idle replicas share cold prefixes instead of
    all landing on the first), then id.

    Keys held come first because they are shared state, read in the same atomic step as the placement,
    so every gateway places alike and the placements split the prefixes evenly; in-flight load is each
    gateway's own view and a property of the moment (placing by it first split 8 documents 5 + 3, and a
    62.5 % share is within the share bound at ε = 0.25, so nothing corrected it)."""
    h = held or {}
    return min(
        replicas, key=lambda r: (h.get(r.id, 0), r.load, recent.get(r.id, 0), tie_hash(tie, r.id), r.id)
    )


def recent_counts(recent: Sequence[str], replicas: Sequence[ReplicaView]) -> dict[str, int]:
    """Each candidate's count among the recent picks (non-candidates left out)."""
    counts = dict.fromkeys((r.id for r in replicas), 0)
    for rid in recent:
        if rid in counts:
            counts[rid] += 1
    return counts


def qualifying(inp: PickInput, recent: Mapping[str, int]) -> Callable[[ReplicaView], bool]:
    """Whether a candidate passes both bounds: in flight (``inp.ratio``) and recent share
    (``inp.share_ratio``)."""
    n, total, shares = len(inp.replicas), sum(r.load for r in inp.replicas), sum(recent.values())
    return lambda r: (
        accepts(r.load, total, n, inp.ratio) and accepts(recent.get(r.id, 0), shares, n, inp.share_ratio)
    )


def best_holder(
    holders: Sequence[ReplicaView], ok: Callable[[ReplicaView], bool], recent: Mapping[str, int]
) -> ReplicaView | None:
    """Of a prefix's holders (latest placed first) that qualify: the smallest recent share, then the
    least loaded, then the latest placed; None when none qualifies."""
    good = [(recent.get(r.id, 0), r.load, k, r) for k, r in enumerate(holders) if ok(r)]
    return min(good, key=lambda t: t[:3])[3] if good else None


def decide(
    inp: PickInput,
    holders: Sequence[Sequence[str]],
    session_replica: str | None,
    recent: Sequence[str] = (),
    held: Mapping[str, int] | None = None,
) -> Decision:
    """Where the request goes, from the holders of each of its chain keys, its session's replica, the
    replicas of the recent picks (latest first) and the number of keys each candidate holds (``held``).

    1. The session's last replica, when it is a candidate that qualifies (:func:`qualifying`).
    2. Else the longest chain key that some candidate holds: of its holders that qualify, the one with
       the smallest recent share, then the least loaded, then the latest placed (``hit``; a prefix that
       moved once is held by both replicas, and its requests then share them); if none qualifies, the
       least loaded qualifying replica (``moved``: the placement follows it when recorded).
    3. No candidate holds any prefix: the least loaded qualifying replica (``cold``).

    "Least loaded" is :func:`least_loaded` (fewest keys held, then load) among the qualifying
    candidates; when none qualifies, the least loaded of all by load alone (so the in-flight bound
    still holds: the least loaded replica always passes it).
    """
    reps = inp.replicas
    by_id = {r.id: r for r in reps}
    counts = recent_counts(recent, reps)
    ok = qualifying(inp, counts)
    tie = inp.chain[0] if inp.chain else ""
    depth, outcome, chosen = 0, "cold", None
    for j in range(len(inp.chain), 0, -1):
        known = [by_id[h] for h in holders[j - 1] if h in by_id]
        if known:
            depth, outcome = j, "moved"
            chosen = best_holder(known, ok, counts)
            break
    session = by_id.get(session_replica) if session_replica else None
    if session is not None and ok(session):
        return Decision(session.id, "session", depth)
    if chosen is not None:
        return Decision(chosen.id, "hit", depth)
    pool = [r for r in reps if ok(r)]
    if not pool:  # by load alone: the least loaded replica always passes the in-flight bound
        return Decision(least_loaded(reps, tie, counts).id, outcome, depth)
    return Decision(least_loaded(pool, tie, counts, held).id, outcome, depth)


@dataclass(slots=True)
class PrefixIndex:
    """One model's index in memory: the reference of what the Redis script keeps and does."""

    holders: dict[str, list[str]] = field(default_factory=dict)
    lru: dict[str, dict[str, int]] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)
    sessions: dict[str, str] = field(default_factory=dict)
    clock: int = 0
    recent: list[str] = field(default_factory=list)
    kv: dict[str, set[str]] = field(default_factory=dict)
    """Per replica, the keys its engine holds (exact mode: written from its KV events)."""

    def drop_holder(self, key: str, replica: str) -> None:
        rest = [h for h in self.holders.get(key, []) if h != replica]
        if rest:
            self.holders[key] = rest
        else:
            self.holders.pop(key, None)

    def purge(self, replica: str) -> None:
        """Drop every entry of one replica (it restarted or left)."""
        for key in sorted(set(self.lru.pop(replica, {})) | self.kv.pop(replica, set())):
            self.drop_holder(key, replica)

    def forget_absent(self, present: Collection[str]) -> list[str]:
        """Drop the replicas that are no longer registered; returns their ids, sorted."""
        gone = sorted(r for r in self.instances if r not in present)
        for r in gone:
            self.purge(r)
            del self.instances[r]
        return gone

    def check_instances(self, replicas: Sequence[ReplicaView]) -> None:
        for r in replicas:
            if self.instances.get(r.id) != r.instance and not r.exact:
                self.purge(r.id)
                self.instances[r.id] = r.instance
            elif r.id not in self.instances:
                self.instances[r.id] = r.instance  # first seen (exact): known, so that its departure is seen

    def record(self, chain: Sequence[str], replica: ReplicaView) -> None:
        """The chosen replica first among each key's holders; LRU touch, then eviction over capacity."""
        if not chain:
            return
        self.clock += 1
        for key in chain:
            self.holders[key] = [replica.id, *(h for h in self.holders.get(key, []) if h != replica.id)]
        used = self.lru.setdefault(replica.id, {})
        for key in chain:
            used[key] = self.clock
        over = len(used) - replica.capacity
        if over > 0:
            for key in sorted(used, key=lambda k: (used[k], k))[:over]:
                del used[key]
                if key not in self.kv.get(replica.id, ()):
                    self.drop_holder(key, replica.id)

    def apply_events(
        self, replica: str, instance: str, added: Sequence[str], removed: Sequence[str], reset: bool = False
    ) -> None:
        """What a managing agent learnt from the replica's KV events (``llmgw_contract/lua/kv_apply.lua``): a
        new instance or a reset drops its entries; an added key joins its KV set and its holders (last) and
        leaves its pending placements; a removed key leaves all three."""
        if reset or self.instances.get(replica) != instance:
            self.purge(replica)
            self.instances[replica] = instance
        held, placed = self.kv.setdefault(replica, set()), self.lru.setdefault(replica, {})
        for key in added:
            held.add(key)
            placed.pop(key, None)
            holders = self.holders.setdefault(key, [])
            if replica not in holders:
                holders.append(replica)
        for key in removed:
            held.discard(key)
            placed.pop(key, None)
            self.drop_holder(key, replica)

    def pick(self, inp: PickInput) -> Decision:
        """Read, decide and record, as the Lua script does in one step."""
        self.check_instances(inp.replicas)
        holders = [self.holders.get(key, []) for key in inp.chain]
        session_replica = self.sessions.get(inp.session) if inp.session else None
        held = {r.id: len(self.lru.get(r.id, {})) + len(self.kv.get(r.id, ())) for r in inp.replicas}
        decision = decide(inp, holders, session_replica, self.recent[: inp.window], held)
        chosen = next(r for r in inp.replicas if r.id == decision.replica)
        if not inp.detour:
            self.record(inp.chain, chosen)
            if inp.session:
                self.sessions[inp.session] = chosen.id
        self.recent = [chosen.id, *self.recent][: inp.window]
        return decision
