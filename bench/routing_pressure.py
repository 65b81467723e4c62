"""The pressure workload: shared documents whose working set overflows one replica's prefix cache but fits
the fleet's, and its short form on the FAKE ENGINE (``python -m bench.routing_pressure``; ``make test``
runs it through tests/bench/test_routing_pressure.py).

The workload: ``docs`` documents of ``doc_words`` words, each asked ``questions`` one-shot questions,
shuffled (:func:`bench.routing_workloads.templates`, with more and longer documents). On the real
replicas (``make bench-routing``'s ``pressure`` rows, :mod:`bench.routing`): 32 documents of ~1,300
SmolLM2 tokens (1,150 words of the word list) on two replicas with 1 GiB of KV cache each (about 23k
tokens): 41.6k tokens of documents, so one replica cannot keep them all, and two can keep half each.
The reference is the *perfect split* (:func:`bench.routing_workloads.perfect_split`): one replica alone
serving the requests of half the documents, which is what each replica of a perfect router sees.

The FAKE ENGINE form: two engines whose prefix-cache model (testing/fake_prefix_cache.py) holds
``headroom`` × the blocks of half the documents, each reporting a KV cache of that many 16-token blocks
(``vllm:cache_config_info``, which the gateways size the approximate index's LRU bound from); real
gateways (2 and 4) and a real Redis; per policy a fresh fleet. Reported per row: the prefix-cache hit
rate from the engines' counters, its share of the perfect split's, each replica's share, errors.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.fake_fleet import FakeFleet, counters, fake_fleet
from bench.routing import Client, ratio, run_templates, shares
from bench.routing_workloads import TemplateRequest, chat_messages, perfect_split, templates
from testing.fake_prefix_cache import PrefixCache, prompt_text
from testing.procs import start_redis

MODEL = "pressure-model"
PERFECT = "perfect split"


def document_blocks(reqs: list[TemplateRequest], block_chars: int = 64) -> int:
    """Prefix-cache blocks (the FAKE ENGINE's) the distinct documents of ``reqs`` fill."""
    cache = PrefixCache(1 << 30, block_chars)
    seen = {r.doc: r.system for r in reqs}
    return sum(len(cache.chain(prompt_text({"messages": chat_messages(s, [], "")}))) for s in seen.values())


@dataclass(frozen=True, slots=True)
class Options:
    docs: int = 16
    questions: int = 6
    doc_words: int = 300
    headroom: float = 1.15
    concurrency: int = 8
    max_tokens: int = 4
    prefill_ms_per_block: float = 1.0
    gateways: tuple[int, ...] = (2, 4)
    policies: tuple[str, ...] = ("round_robin", "prefix_affinity")
    seed: int = 1
    extra_env: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    """Per row label beyond the policies: gateway environment (e.g. another index mode)."""


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    gateways: int
    requests: int
    errors: int
    hit_rate: float
    shares: list[float]
    of_perfect: float = math.nan


async def serve(urls: list[str], reqs: list[TemplateRequest], o: Options) -> int:
    """Send the requests through the gateways in turn, ``o.concurrency`` at a time; the errors."""
    limits = httpx.Limits(max_connections=o.concurrency, max_keepalive_connections=o.concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        client = Client(http, urls, MODEL, o.max_tokens)
        await run_templates(client, reqs, o.concurrency)
    return sum(not s.ok for s in client.samples)


async def one_row(label: str, fleet: FakeFleet, reqs: list[TemplateRequest], redis_url: str, o: Options,
                  tmp: Path) -> Row:  # fmt: skip
    async with fake_fleet(fleet, redis_url, tmp) as running:
        before = await counters(running.engine_urls)
        errors = await serve(running.gateway_urls, reqs, o)
        deltas = [a - b for a, b in zip(await counters(running.engine_urls), before, strict=True)]
    hit = ratio(sum(d.hits for d in deltas), sum(d.queries for d in deltas))
    row = Row(label, fleet.gateways, len(reqs), errors, hit, shares([d.requests for d in deltas]))
    print(f"[pressure] {label} through {fleet.gateways} gateway(s): hit rate {hit:.3f}", file=sys.stderr)
    return row


async def bench(o: Options) -> list[Row]:
    """The perfect split first, then per gateway count each policy (and each extra row) on a fresh fleet."""
    reqs = templates(o.seed, o.docs, o.questions, o.doc_words)
    half = perfect_split(reqs, o.docs)
    blocks = math.ceil(document_blocks(half) * o.headroom)
    assert document_blocks(reqs) > blocks, "the working set must overflow one replica's cache"

    def fleet(policy: str, replicas: int, gateways: int, env: tuple[tuple[str, str], ...] = ()) -> FakeFleet:
        return FakeFleet(MODEL, policy, replicas, gateways, o.max_tokens, blocks, o.prefill_ms_per_block,
                         kv_blocks=blocks, env=env)  # fmt: skip

    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="llmgw-pressure-") as d:
        tmp = Path(d)
        redis_proc = start_redis(tmp)
        url = f"redis://127.0.0.1:{redis_proc.port}/0"
        try:
            perfect = await one_row(PERFECT, fleet("round_robin", 1, 1), half, url, o, tmp)
            rows.append(perfect)
            runs = [(p, p, ()) for p in o.policies] + [
                (label, "prefix_affinity", env) for label, env in o.extra_env.items()
            ]
            for g in o.gateways:
                for label, policy, env in runs:
                    row = await one_row(label, fleet(policy, 2, g, env), reqs, url, o, tmp)
                    rows.append(dataclasses.replace(row, of_perfect=ratio(row.hit_rate, perfect.hit_rate)))
        finally:
            redis_proc.stop()
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| policy | gateways | requests | errors | hit rate | % of perfect split | shares |",
             "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for r in rows:
        of = "" if math.isnan(r.of_perfect) else f"{r.of_perfect:.1%}"
        share = " / ".join(f"{s:.1%}" for s in r.shares)
        lines.append(
            f"| {r.label} | {r.gateways} | {r.requests} | {r.errors} | {r.hit_rate:.1%} | {of} | {share} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    d = Options()
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--docs", type=int, default=d.docs)
    p.add_argument("--questions", type=int, default=d.questions)
    p.add_argument("--doc-words", type=int, default=d.doc_words)
    p.add_argument("--gateways", default="2,4", help="gateway counts, comma-separated")
    p.add_argument("--seed", type=int, default=d.seed)
    a = p.parse_args(argv)
    o = Options(docs=a.docs, questions=a.questions, doc_words=a.doc_words, seed=a.seed,
                gateways=tuple(int(x) for x in a.gateways.split(",")))  # fmt: skip
    print(table(asyncio.run(bench(o))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
