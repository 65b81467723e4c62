"""The fault suite's client faults: a client whose connection to the gateway is cut after its request was
written, and that retries as the official openai SDK does with its ``Idempotency-Key`` (and, for a
stream it got part of, ``Last-Event-ID``), to either gateway (bench/client_cuts.py). The retry carries
the first's ``X-Request-Id``, so the checker of generations per request (bench/faults/checks.py,
:func:`~bench.faults.checks.count_runs`) counts a second generation as that request run twice."""

from __future__ import annotations

import random
from collections import Counter

import httpx

from bench.client_cuts import CUTS, PROMPTS, Setup, reference, trial
from bench.client_cuts_stacks import FakeCounts
from bench.faults.checks import ANSWERED, LOST, Outcome
from bench.faults.ctx import Ctx, replica_urls
from bench.faults.workload import CHAT


async def client_cut_retry(c: Ctx) -> str:
    """Two keyed requests per cut point (a stream before its first byte once a replica has it,
    mid-stream, at the last event; a non-streamed one once a replica has it), each cut and retried
    through the SDK; answered when the client's bytes equal an uninterrupted request's (ids and times
    masked), lost otherwise."""
    cfg = c.stack.config
    gateways = [f"http://{cfg.host}:{port}" for port in cfg.gateway_ports]
    rng = random.Random(c.load.seed)
    async with httpx.AsyncClient(timeout=httpx.Timeout(c.load.timeout_s, connect=5.0)) as client:
        counts = FakeCounts(client, replica_urls(c))
        setup = Setup(gateways, CHAT, counts.runs, counts.began, 8, headers=c.load.tenants[0])
        want = {s: await reference(setup, client, PROMPTS[0], s) for s in (True, False)}
        for cut in CUTS * 2:
            t = await trial(setup, client, cut, PROMPTS[0], want[cut != "whole"], rng, rid=c.load.next_id())
            why = t.error or ("" if t.identical else "the resumed stream differs from an uninterrupted one")
            c.strike.outcomes.append(Outcome(f"cut-{cut}", True, LOST if why else ANSWERED, why))
    ends = Counter(o.outcome for o in c.strike.outcomes)
    return f"{len(CUTS) * 2} keyed requests cut and retried as the SDK does: " + ", ".join(
        f"{n} {k}" for k, n in ends.most_common()
    )
