"""What the load bound costs the shared prefix index on two replicas: a pure replay, no vLLM, no Redis.

``python -m bench.routing_bound`` sends ``make bench-routing``'s conversations (every turn with its
user's session) and templates, in the benchmark's order, through the reference
:class:`gateway.routing.prefix.index.PrefixIndex` (the same decision as the Lua script) on two replicas,
with :mod:`bench.routing_sim`'s load model (a request holds its replica for the next ``hold`` arrivals),
through one or several gateways (``--gateways``: requests to each in turn, each deciding from its own
view of the loads, the others' counts as published every ``--refresh`` arrivals, the index shared),
for several in-flight depths and bounds (in flight only, as before, and the share bound of today's
default). It prints, per row, the simulated prefix hit rate (matched
chunks over all chunks, unbounded caches) as a share of one replica serving everything, the shares, and
the pick outcomes. A *moved* pick is the only way a request misses beyond the ideal here (cold placements
are one per distinct prefix, as on one replica), so the rows show how many moves each ε makes and what
they cost. A model, not a measurement: the benchmark itself measures vLLM's own counters.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.routing_sim import CHUNK, MAX_CHUNKS, MODEL, Req, hit_rate
from bench.routing_workloads import chat_messages, conversations, templates
from gateway.routing.prefix.chain import request_chain
from gateway.routing.prefix.index import PickInput, PrefixIndex, ReplicaView, bound_ratio, capacity_keys

IDS = ("r0", "r1")


def conversation_requests(users: int, turns: int, seed: int) -> list[Req]:
    """Turn by turn, users shuffled within a turn; the history's answers stand in as fixed text."""
    rng, convs, out = random.Random(seed), conversations(seed, users, turns), []
    for t in range(turns):
        batch = []
        for c in convs:
            history = [(turn.question, "tok0 tok1 tok2 tok3 ") for turn in c.turns[:t]]
            payload = {"model": MODEL, "messages": chat_messages(c.system, history, c.turns[t].question)}
            payload["user"] = c.id
            batch.append(Req(payload, request_chain(payload, CHUNK, MAX_CHUNKS), c.id))
        rng.shuffle(batch)
        out += batch
    return out


def template_requests(docs: int, questions: int, seed: int) -> list[Req]:
    payloads = [
        {"model": MODEL, "messages": chat_messages(r.system, [], r.question)}
        for r in templates(seed, docs, questions)
    ]
    return [Req(p, request_chain(p, CHUNK, MAX_CHUNKS), None) for p in payloads]


def one_prompt_requests(questions: int, seed: int) -> list[Req]:
    """Every request starts with one shared system prompt (a chat app's): the hottest prefix there is."""
    return template_requests(1, questions, seed)


def skewed_requests(docs: int, requests: int, seed: int) -> list[Req]:
    """Shared documents of Zipf popularity (s = 1: the first asked ``docs`` times as often as the last)."""
    rng, by_doc = random.Random(seed), dict[str, list[Req]]()
    for r in template_requests(docs, requests, seed):
        by_doc.setdefault(r.chain[0], []).append(r)
    keys = sorted(by_doc)
    weights = [1 / (i + 1) for i in range(len(keys))]
    return [rng.choice(by_doc[rng.choices(keys, weights)[0]]) for _ in range(requests)]


@dataclass(frozen=True)
class Rule:
    """A bound for the index: in flight (ε), and over the share of the last ``window`` picks (ε or None)."""

    name: str
    inflight: float
    share: float | None
    window: int = 64

    def input(self, req: Req, reps: tuple[ReplicaView, ...]) -> PickInput:
        share = (1, 0) if self.share is None else bound_ratio(self.share)
        return PickInput(req.chain, reps, bound_ratio(self.inflight), req.session, share, self.window)


class GatewayLoads:
    """Simulated in-flight load as ``gateways`` gateways see it: a request holds its replica for the next
    ``hold`` arrivals; each gateway knows its own in-flight counts exactly and the others' as they
    published them, every ``refresh`` arrivals (the gateways' 0.1 s in-flight share)."""

    def __init__(self, ids: Sequence[str], hold: int, gateways: int = 1, refresh: int = 1) -> None:
        self.own = [dict.fromkeys(ids, 0) for _ in range(gateways)]
        self.published = [dict.fromkeys(ids, 0) for _ in range(gateways)]
        self.window: list[tuple[int, str]] = []
        self.hold, self.refresh, self.arrivals = hold, refresh, 0

    def view(self, gateway: int) -> dict[str, int]:
        """Gateway ``gateway``'s load per replica: its own, plus the others' last published counts."""
        others = [p for g, p in enumerate(self.published) if g != gateway]
        return {r: n + sum(p[r] for p in others) for r, n in self.own[gateway].items()}

    def place(self, gateway: int, rid: str) -> None:
        self.own[gateway][rid] += 1
        self.window.append((gateway, rid))
        if len(self.window) > self.hold:
            g, r = self.window.pop(0)
            self.own[g][r] -= 1
        self.arrivals += 1
        if self.arrivals % self.refresh == 0:
            self.published = [dict(own) for own in self.own]


def replay(
    reqs: Sequence[Req], hold: int, rule: Rule, gateways: int = 1, refresh: int = 1
) -> tuple[float, list[float], Counter[str]]:
    """Hit rate as a share of the single replica's, each replica's share, the pick outcomes; the
    requests reach the ``gateways`` in turn (nginx's round robin), each deciding from its own view of
    the loads (:class:`GatewayLoads`) and the one shared index."""
    loads, index, placed, outcomes = (
        GatewayLoads(IDS, hold, gateways, refresh),
        PrefixIndex(),
        [],
        Counter[str](),
    )
    cap = capacity_keys(65536, CHUNK)
    for n, r in enumerate(reqs):
        g = n % gateways
        view = loads.view(g)
        d = index.pick(rule.input(r, tuple(ReplicaView(i, "i0", view[i], cap) for i in IDS)))
        loads.place(g, d.replica)
        placed.append(d.replica)
        outcomes[d.outcome] += 1
    ideal = hit_rate(reqs, [IDS[0]] * len(reqs))
    counts = Counter(placed)
    return hit_rate(reqs, placed) / ideal, [counts[i] / len(placed) for i in IDS], outcomes


RULES = (
    Rule("in flight ε 0.25", 0.25, None),
    Rule("in flight ε 1 (none on 2)", 1.0, None),
    Rule("share ε 0.25 + in flight ε 1 (default)", 1.0, 0.25),
    Rule("share ε 0.5 + in flight ε 1", 1.0, 0.5),
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="bench.routing_bound", description=__doc__.split("\n")[0] if __doc__ else ""
    )
    p.add_argument("--users", type=int, default=16)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--docs", type=int, default=4)
    p.add_argument("--questions", type=int, default=40)
    p.add_argument("--seeds", type=int, default=3, help="each row: the worst of this many seeds")
    p.add_argument("--gateways", type=int, default=1, help="gateways, each with its own view of the loads")
    p.add_argument("--refresh", type=int, default=4, help="arrivals between the gateways' load shares")
    a = p.parse_args(argv)
    workloads: dict[str, Callable[[int], list[Req]]] = {
        f"conversations {a.users}x{a.turns}": lambda s: conversation_requests(a.users, a.turns, s),
        f"templates {a.docs}x{a.questions}": lambda s: template_requests(a.docs, a.questions, s),
        f"one system prompt x{a.docs * a.questions}": lambda s: one_prompt_requests(a.docs * a.questions, s),
        f"zipf 8 documents x{a.docs * a.questions}": lambda s: skewed_requests(8, a.docs * a.questions, s),
    }
    print(
        f"worst of seeds 1..{a.seeds} and in-flight depths 2, 4, 8 "
        f"(a request holds its replica for so many arrivals), {a.gateways} gateway(s)"
    )
    for name, make in workloads.items():
        reqs = [make(seed) for seed in range(1, a.seeds + 1)]
        for rule in RULES:
            runs = [replay(r, hold, rule, a.gateways, a.refresh) for r in reqs for hold in (2, 4, 8)]
            worst_hit = min(h for h, _, _ in runs)
            worst_dev = max(abs(s[0] - 0.5) for _, s, _ in runs)
            moved = sum(o["moved"] for _, _, o in runs) / len(runs)
            print(
                f"{name:28s} {rule.name:40s} hit >= {worst_hit * 100:5.1f}% of ideal  "
                f"shares 50 ± {worst_dev * 100:4.1f}  moved {moved:5.1f} per run"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
