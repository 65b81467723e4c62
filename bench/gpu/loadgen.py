"""A small closed-loop load generator for OpenAI ``/v1/completions`` (httpx, asyncio).

Each of ``inflight`` workers sends one request at a time: a prompt of ``prompt_tokens`` random token ids
(no prefix-cache hits), ``max_tokens`` output tokens with ``ignore_eos``, greedy, not streamed.  Throughput
is measured over a window after a warm-up: every request's output tokens count in proportion to the part
of its lifetime inside the window, so waves of requests that end just outside it do not skew the rate.
Workers stop sending at the window's end and the requests in flight are awaited (never abandoned: vLLM
would go on decoding them into the next run).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass(frozen=True)
class Load:
    inflight: int
    warmup_s: float = 4.0
    window_s: float = 12.0
    prompt_tokens: int = 256
    max_tokens: int = 128
    token_low: int = 1000
    token_high: int = 48000  # below every model's vocab (the smallest is 49,152)


@dataclass
class Done:
    start: float
    end: float
    tokens: int


@dataclass
class RunResult:
    model: str
    url: str
    inflight: int
    window_s: float
    window_tokens: float = 0.0
    window_requests: float = 0.0
    completed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)

    @property
    def tok_s(self) -> float:
        return self.window_tokens / self.window_s

    @property
    def req_s(self) -> float:
        return self.window_requests / self.window_s

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        return {
            "model": self.model,
            "url": self.url,
            "inflight": self.inflight,
            "window_s": self.window_s,
            "output_tok_s": round(self.tok_s, 1),
            "req_s": round(self.req_s, 2),
            "completed": self.completed,
            "errors": dict(self.errors),
            "latency_p50_s": round(statistics.median(lat), 3) if lat else None,
            "latency_p99_s": round(lat[int(0.99 * (len(lat) - 1))], 3) if lat else None,
        }


def window_share(done: Done, t0: float, t1: float) -> float:
    """The fraction of a request's lifetime inside [t0, t1]."""
    life = done.end - done.start
    if life <= 0:
        return 1.0 if t0 <= done.end <= t1 else 0.0
    return max(0.0, min(done.end, t1) - max(done.start, t0)) / life


def body(model: str, load: Load, rng: random.Random) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": [rng.randrange(load.token_low, load.token_high) for _ in range(load.prompt_tokens)],
        "max_tokens": load.max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": False,
    }


async def one(client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> tuple[int, str]:
    try:
        r = await client.post(f"{url}/v1/completions", json=payload)
    except httpx.HTTPError as exc:
        return 0, type(exc).__name__
    if r.status_code != 200:
        return 0, f"http {r.status_code}"
    return int(r.json().get("usage", {}).get("completion_tokens", 0)), ""


async def closed_loop(
    client: httpx.AsyncClient, url: str, model: str, load: Load, seed: int = 0, start_at: float | None = None
) -> RunResult:
    """Run ``load.inflight`` workers against one model at ``url``; returns the window's numbers."""
    t_start = (start_at or time.monotonic()) + load.warmup_s
    t_end = t_start + load.window_s
    res = RunResult(model, url, load.inflight, load.window_s)
    done: list[Done] = []

    async def worker(i: int) -> None:
        rng = random.Random(seed * 100_003 + i)
        while time.monotonic() < t_end:
            s = time.monotonic()
            tokens, err = await one(client, url, body(model, load, rng))
            e = time.monotonic()
            if err:
                res.errors[err] += 1
                await asyncio.sleep(0.05)
                continue
            done.append(Done(s, e, tokens))

    await asyncio.gather(*(worker(i) for i in range(load.inflight)))
    for d in done:
        share = window_share(d, t_start, t_end)
        res.window_tokens += d.tokens * share
        res.window_requests += share
        if t_start <= d.end <= t_end:
            res.latencies.append(d.end - d.start)
    res.completed = len(done)
    return res


def client_for(total_inflight: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=total_inflight + 16, max_keepalive_connections=total_inflight + 16)
    return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(300.0, connect=10.0))
