"""What the load bound costs the shared prefix index on two replicas: a pure replay, no vLLM, no Redis.

``python -m bench.routing_bound`` sends ``make bench-routing``'s conversations (every turn with its
user's session) and templates, in the benchmark's order, through the reference
:class:`gateway.routing.prefix_index.PrefixIndex` (the same decision as the Lua script) on two replicas,
with :mod:`bench.routing_sim`'s load model (a request holds its replica for the next ``hold`` arrivals),
for several in-flight depths and load bounds ε. It prints, per row, the simulated prefix hit rate (matched
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
from collections.abc import Sequence

from bench.routing_sim import CHUNK, MAX_CHUNKS, MODEL, Loads, Req, hit_rate, views
from bench.routing_workloads import chat_messages, conversations, templates
from gateway.prefix_chain import request_chain
from gateway.routing.prefix_index import PickInput, PrefixIndex, bound_ratio, capacity_keys

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


def replay(reqs: Sequence[Req], hold: int, epsilon: float) -> tuple[float, list[float], Counter[str]]:
    """Hit rate as a share of the single replica's, each replica's share, the pick outcomes."""
    loads, index, placed, outcomes = Loads(IDS, hold), PrefixIndex(), [], Counter[str]()
    cap = capacity_keys(65536, CHUNK)
    for r in reqs:
        d = index.pick(PickInput(r.chain, views(IDS, loads, cap), bound_ratio(epsilon), r.session))
        loads.place(d.replica)
        placed.append(d.replica)
        outcomes[d.outcome] += 1
    ideal = hit_rate(reqs, [IDS[0]] * len(reqs))
    counts = Counter(placed)
    return hit_rate(reqs, placed) / ideal, [counts[i] / len(placed) for i in IDS], outcomes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="bench.routing_bound", description=__doc__.split("\n")[0] if __doc__ else ""
    )
    p.add_argument("--users", type=int, default=16)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--docs", type=int, default=4)
    p.add_argument("--questions", type=int, default=40)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    workloads = {
        f"conversations {a.users}x{a.turns}": conversation_requests(a.users, a.turns, a.seed),
        f"templates {a.docs}x{a.questions}": template_requests(a.docs, a.questions, a.seed),
    }
    for name, reqs in workloads.items():
        for hold in (2, 4, 8):
            for eps in (0.25, 0.5, 1.0):
                vs_ideal, shares, outcomes = replay(reqs, hold, eps)
                print(
                    f"{name:20s} in flight {hold}  ε {eps:<4g} hit {vs_ideal * 100:5.1f}% of ideal  shares "
                    f"{'/'.join(f'{s * 100:.1f}' for s in shares)}  {dict(sorted(outcomes.items()))}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
