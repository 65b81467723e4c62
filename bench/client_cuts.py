"""`make client-cuts`: a client whose connection is cut, and that retries as the official openai SDK does,
never starts a second generation (issue 46). Each trial sends a request at temperature 0 with its own
``Idempotency-Key`` (and ``X-Request-Id``) to one of several gateways (chosen at random, as a load
balancer does; one Redis behind them all), cuts its connection at a point (:data:`CUTS`: a stream before
its first byte, mid-stream, at its last event; a non-streamed request while it runs), then comes back
through the openai SDK itself (``extra_headers``: the same key and id, and ``Last-Event-ID`` after the
last event it got) to a gateway drawn again. The table: trials per cut point, duplicate generations
counted from the ENGINES' OWN counts (bench/client_cuts_stacks.py: the FAKE ENGINE's generations per
request id; vLLM's successes or prefills), answers byte-identical to an uninterrupted run of the same
prompt (its per-generation ``id`` and ``created`` masked), retries served by another gateway than the
cut one. ``--control N`` adds N trials without a key: their second generations must show.

    python -m bench.client_cuts --engine fake --trials 30          # FAKE ENGINE, in-process gateways
    python -m bench.client_cuts --engine vllm --trials 24 --control 4   # two SmolLM2 CPU replicas
    python -m bench.client_cuts --engine fake --no-key             # what a client without a key costs
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import random
import re
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

from testing.poll import until

CUTS = ("before-first-byte", "mid-stream", "last-event", "whole")
"""Where the client's connection is cut: a stream's, once an engine has it and before the client read a
byte, after two events, before the last (``[DONE]``); ``whole``: a non-streamed request's, once an engine
has it (the SDK's read timeout)."""
PROMPTS = ("Tell me about the sea.", "Name three colours.", "Count to ten.", "Describe a lighthouse.")
MASK = ((re.compile(rb'"id": ?"[^"]*"'), b'"id":""'), (re.compile(rb'"created": ?\d+'), b'"created":0'))
Count = Callable[[str], Awaitable[int]]
"""The engines' own count of the generations they ran (or began) for a request id, summed over the
replicas (an engine that cannot tell ids apart counts all: the harness runs one trial at a time)."""
Began = Callable[[str], Awaitable[bool]]
"""Whether an engine has the request (its id) in its batch or queue."""


@dataclass(frozen=True)
class Setup:
    """What a trial runs against: the gateways' URLs, the model, the engines' own count."""

    gateways: list[str]
    model: str
    generations: Count
    began: Began
    max_tokens: int = 16
    prompts: tuple[str, ...] = PROMPTS
    """The trials' prompts, in turn."""
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with every request (a tenant's ``Authorization``)."""
    logs: list[Path] = field(default_factory=list)
    """The engines' request logs (``Received request <id>``), where known: the fault checker reads them."""


@dataclass(frozen=True)
class Trial:
    cut: str
    generations: int
    """How many generations the engines ran for this trial (1: exactly once)."""
    identical: bool
    other_gateway: bool
    error: str = ""


@dataclass
class Table:
    trials: list[Trial] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for cut in [*CUTS, *(f"{c} (no key)" for c in CUTS)]:
            ts = [t for t in self.trials if t.cut == cut]
            if not ts:
                continue
            out.append({
                "cut": cut,
                "trials": len(ts),
                "duplicates": sum(max(0, t.generations - 1) for t in ts),
                "byte_identical_pct": round(100 * sum(t.identical for t in ts) / len(ts)),
                "other_gateway_pct": round(100 * sum(t.other_gateway for t in ts) / len(ts)),
                "errors": sum(bool(t.error) for t in ts),
            })  # fmt: skip
        return out

    def text(self) -> str:
        head = "| cut point | trials | duplicate generations | byte-identical | other gateway | errors |"
        lines = [head, "|---|---:|---:|---:|---:|---:|"]
        for r in self.rows():
            lines.append(f"| {r['cut']} | {r['trials']} | {r['duplicates']} | {r['byte_identical_pct']} % | "
                         f"{r['other_gateway_pct']} % | {r['errors']} |")  # fmt: skip
        return "\n".join(lines)


def body(setup: Setup, prompt: str, stream: bool = True) -> dict[str, Any]:
    msgs = [{"role": "user", "content": prompt}]
    req = {"model": setup.model, "messages": msgs, "max_tokens": setup.max_tokens, "temperature": 0}
    return {**req, "stream": True} if stream else req  # as the SDK writes it (its retry: the same body)


def masked(stream: bytes) -> bytes:
    """A stream without what differs between two generations of the same prompt: their ids, their time."""
    for pattern, repl in MASK:
        stream = pattern.sub(repl, stream)
    return stream


def last_id(got: bytes) -> str:
    """The ``id:`` of the last whole event in ``got`` ('' before any)."""
    ids = re.findall(rb"^id: (\S+)$", got.rsplit(b"\n\n", 1)[0] if b"\n\n" in got else b"", re.M)
    return ids[-1].decode() if ids else ""


async def first_attempt(
    setup: Setup, client: httpx.AsyncClient, url: str, req: dict[str, Any], headers: dict[str, str], cut: str
) -> bytes:
    """The request, cut at ``cut``: what the client got before its connection closed."""
    got = b""
    if cut in ("before-first-byte", "whole"):  # gone once an engine has the request, having read nothing
        held = asyncio.create_task(hold_unread(client, url, req, headers))
        try:
            rid = headers["x-request-id"]
            await until(lambda: setup.began(rid), 10.0, "an engine has the request", interval_s=0.005)
        finally:
            held.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await held
        return got
    async with client.stream("POST", f"{url}/v1/chat/completions", json=req, headers=headers) as r:
        async for chunk in r.aiter_bytes():
            got += chunk
            events = got.count(b"\n\n")
            if (cut == "mid-stream" and events >= 2) or (cut == "last-event" and b"[DONE]" in got):
                break
    if cut == "last-event":  # the client got every event but the last: [DONE]
        got = got[: got.rindex(b"\n\n", 0, got.index(b"[DONE]")) + 2]
    elif cut == "mid-stream":
        got = got[: got.rindex(b"\n\n") + 2]
    return got


async def hold_unread(
    client: httpx.AsyncClient, url: str, req: dict[str, Any], headers: dict[str, str]
) -> None:
    """The request sent; its answer never read (until cancelled: the connection closes)."""
    async with client.stream("POST", f"{url}/v1/chat/completions", json=req, headers=headers):
        await asyncio.Event().wait()


async def sdk_retry(url: str, req: dict[str, Any], headers: dict[str, str]) -> bytes:
    """The request again through the openai SDK (its own retries on; ``extra_headers``), its raw bytes."""
    if not req.get("stream"):
        return await sdk_whole(url, req, headers)
    extra = {k: v for k, v in headers.items() if k.lower() != "authorization"}
    key = headers.get("authorization", "").removeprefix("Bearer ") or "none"  # the SDK's own header
    sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=2, timeout=60.0)
    try:
        async with sdk.chat.completions.with_streaming_response.create(
            model=req["model"], messages=req["messages"], max_tokens=req["max_tokens"],
            temperature=req["temperature"], stream=True, extra_headers=extra,
        ) as r:  # fmt: skip
            return b"".join([part async for part in r.iter_bytes()])
    finally:
        await sdk.close()


async def sdk_whole(url: str, req: dict[str, Any], headers: dict[str, str]) -> bytes:
    """A non-streamed request again through the openai SDK, its raw body."""
    extra = {k: v for k, v in headers.items() if k.lower() != "authorization"}
    key = headers.get("authorization", "").removeprefix("Bearer ") or "none"
    sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=2, timeout=60.0)
    try:
        raw = await sdk.chat.completions.with_raw_response.create(
            model=req["model"], messages=req["messages"], max_tokens=req["max_tokens"],
            temperature=req["temperature"], extra_headers=extra,
        )  # fmt: skip
        return raw.http_response.content
    finally:
        await sdk.close()


async def settled(count: Count, rid: str, before: int, want: int, deadline_s: float) -> int:
    """The engines' count once it reached ``before + want`` (a cut generation ends after its retry's
    answer on vLLM) or ``deadline_s`` passed; a second generation started late shows here too."""
    with contextlib.suppress(AssertionError):
        await until(lambda: reached(count, rid, before + want), deadline_s, "the count", interval_s=0.05)
    await asyncio.sleep(0.1)
    return await count(rid) - before


async def reached(count: Count, rid: str, n: int) -> bool:
    return await count(rid) >= n


async def reference(setup: Setup, client: httpx.AsyncClient, prompt: str, stream: bool = True) -> bytes:
    """An uninterrupted keyed request of ``prompt``: what every resumed one must equal."""
    r = await client.post(f"{setup.gateways[0]}/v1/chat/completions", json=body(setup, prompt, stream),
                          headers={**setup.headers, "idempotency-key": uuid.uuid4().hex})  # fmt: skip
    r.raise_for_status()
    return masked(r.content)


async def trial(
    setup: Setup, client: httpx.AsyncClient, cut: str, prompt: str, want: bytes, rng: random.Random,
    keyed: bool = True, rid: str = "",
) -> Trial:  # fmt: skip
    """One cut and its retry; the generations the engines ran for it."""
    req = body(setup, prompt, stream=cut != "whole")
    headers = {**setup.headers, "x-request-id": rid or f"cut-{uuid.uuid4().hex[:12]}"}
    if keyed:
        headers["idempotency-key"] = uuid.uuid4().hex
    first, again = rng.choice(setup.gateways), rng.choice(setup.gateways)
    before = await setup.generations(headers["x-request-id"])
    got, error = b"", ""
    try:
        got = await first_attempt(setup, client, first, req, headers, cut)
        resume = {**headers, "last-event-id": last_id(got)} if keyed and last_id(got) else headers
        rest = await sdk_retry(again, req, resume)
        whole = got + rest if keyed else rest
    except (httpx.HTTPError, openai.OpenAIError) as exc:
        whole, error = b"", f"{type(exc).__name__}: {exc}"
    ran = await settled(setup.generations, headers["x-request-id"], before, 1, 10.0)
    if not keyed:  # a stream without a key carries no SSE ids: the rest must match
        want = re.sub(rb"^id: \d+\n", b"", want, flags=re.M)
    return Trial(cut, ran, not error and masked(whole) == want, first != again, error)


async def run_trials(setup: Setup, trials: int, seed: int, keyed: bool = True, rid_prefix: str = "") -> Table:
    """``trials`` trials, the cut points in turn, the prompts in turn, one at a time."""
    rng, table = random.Random(seed), Table()
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=5.0)) as client:
        refs = {(p, s): await reference(setup, client, p, s) for p in setup.prompts for s in (True, False)}
        for i in range(trials):
            cut, prompt = CUTS[i % len(CUTS)], setup.prompts[i % len(setup.prompts)]
            rid = f"{rid_prefix}{i}" if rid_prefix else ""
            want = refs[prompt, cut != "whole"]
            table.trials.append(await trial(setup, client, cut, prompt, want, rng, keyed, rid))
    return table


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="client_cuts", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--engine", choices=["fake", "vllm"], default="fake")
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--gateways", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--seed", type=int, default=46)
    p.add_argument("--no-key", dest="keyed", action="store_false", help="retry without Idempotency-Key")
    p.add_argument("--control", type=int, default=0,
                   help="then N trials without a key (the counts must see second generations)")  # fmt: skip
    p.add_argument("--out", default="", help="write the table as JSON here")
    return p.parse_args(argv)


async def main_async(a: argparse.Namespace) -> Table:
    from bench.client_cuts_stacks import fake_setup, vllm_setup

    setups = {"fake": fake_setup, "vllm": vllm_setup}
    async with setups[a.engine](a.gateways, a.max_tokens) as setup:
        table = await run_trials(setup, a.trials, a.seed, a.keyed)
        if a.control:
            control = await run_trials(setup, a.control, a.seed + 1, keyed=False)
            table.trials += [dataclasses.replace(t, cut=f"{t.cut} (no key)") for t in control.trials]
        return table


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("httpx", "openai", "llmgw"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    table = asyncio.run(main_async(a))
    print(f"client cuts: engine {a.engine}, {a.gateways} gateways, {a.trials} trials, "
          f"{'keyed' if a.keyed else 'without a key'}, max_tokens {a.max_tokens}, seed {a.seed}")  # fmt: skip
    print(table.text())
    for t in table.trials:
        if t.error:
            print(f"  {t.cut}: {t.error}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"engine": a.engine, "gateways": a.gateways, "rows": table.rows()}, f, indent=1)
    keyed = [t for t in table.trials if t.cut in CUTS]
    ok = all(t.generations == 1 and t.identical for t in keyed)
    return 0 if ok or not a.keyed else 1


if __name__ == "__main__":
    sys.exit(main())
