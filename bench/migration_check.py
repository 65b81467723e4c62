"""Migration under load: N concurrent streams of T tokens at temperature 0, once undisturbed (the
reference texts and TTFT), once with one replica killed (``kill -9`` of its process group) or frozen
(SIGSTOP, thawed at the end) after every stream has tokens. Prints the client-visible errors, how many
texts are byte-identical to the reference, and the stall each moved stream saw (its longest gap between
two events, less its longest gap undisturbed) against the TTFT p50, the gateway's stall histogram, the
survivors' vLLM queue after the fault (running / waiting: a continuation waiting for a batch slot shows
there), the gateways' moves (from their logs) and, after the kill, the re-prefill reference: the
continuations' prompts sent at once as plain completions straight to the survivor running its own
streams (their TTFT is the floor of the stall).

    python -m bench.migration_check --cpu                      # its own stack: two SmolLM2 replicas (CPU)
    python -m bench.migration_check --url http://127.0.0.1:9000 --model llama-2-7b \\
        --replica-ports 8100,8101 --streams 64 --tokens 200    # a running gateway (the GPU recipe)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped]
import yaml

from bench.chaos import free_port, until_true
from llmgw_contract.vllm_metrics import running_and_waiting
from llmgw_contract.vllm_probe import requests_in_engine
from llmgw_tools.stack.stack import Stack, StackConfig

REPO = Path(__file__).resolve().parents[1]
log = logging.getLogger("migration_check")


@dataclass
class Stream:
    text: str = ""
    error: str = ""
    ttft_s: float = 0.0
    events: int = 0
    gaps: list[float] = field(default_factory=list)

    @property
    def max_gap(self) -> float:
        return max(self.gaps, default=0.0)


def body(model: str, i: int, tokens: int) -> dict[str, Any]:
    prompt = f"Story {i}: write a long story about a lighthouse and its keeper."  # spread by prefix
    return {
        "model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": tokens,
        "temperature": 0, "ignore_eos": True, "stream": True,
    }  # fmt: skip


async def one(
    client: httpx.AsyncClient, url: str, req: dict[str, Any], out: Stream, path: str = "chat/completions"
) -> None:
    started = last = time.perf_counter()
    try:
        async with client.stream("POST", f"{url}/v1/{path}", json=req) as r:
            if r.status_code != 200:
                out.error = f"status {r.status_code}"
                return
            buf = ""
            async for part in r.aiter_text():
                buf += part
                while "\n\n" in buf:
                    event, buf = buf.split("\n\n", 1)
                    now = time.perf_counter()
                    if not out.events:
                        out.ttft_s = now - started
                    else:
                        out.gaps.append(now - last)
                    last, out.events = now, out.events + 1
                    data = event.removeprefix("data: ")
                    if data == "[DONE]":
                        return
                    frame = json.loads(data)
                    if "error" in frame:
                        out.error = frame["error"].get("message", "error")
                        continue
                    out.text += "".join(
                        c.get("text") or (c.get("delta") or {}).get("content") or "" for c in frame["choices"]
                    )
        out.error = out.error or "no [DONE]"
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"


def group_of(port: int) -> int:
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if "vllm.entrypoints.openai.api_server" in cmd and str(port) in cmd:
            return os.getpgid(int(p.info["pid"]))
    raise LookupError(f"no vLLM server on port {port}")


async def busiest(client: httpx.AsyncClient, ports: list[int]) -> int:
    """The replica with the most requests in its engine: the one whose failure moves the most streams."""
    counts = [await requests_in_engine(client, f"http://127.0.0.1:{p}") or 0 for p in ports]
    return ports[counts.index(max(counts))]


@dataclass
class Queue:
    """The survivors' vLLM batches after the fault, sampled every 0.2 s: where a continuation waits."""

    survivors: list[int] = field(default_factory=list)
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    """(seconds after the fault, running, waiting) over the survivors."""

    def summary(self) -> dict[str, Any]:
        waiting = [s for s in self.samples if s[2] > 0]
        return {
            "survivor_running_max": max((s[1] for s in self.samples), default=0),
            "survivor_waiting_max": max((s[2] for s in self.samples), default=0),
            "survivor_waiting_until_s": round(waiting[-1][0], 2) if waiting else 0.0,
        }


async def sample_queue(client: httpx.AsyncClient, ports: list[int], queue: Queue, began: float) -> None:
    while True:
        running = waiting = 0
        for p in ports:
            with contextlib.suppress(httpx.HTTPError):
                r = await client.get(f"http://127.0.0.1:{p}/metrics", timeout=2.0)
                got = running_and_waiting(r.content)
                running, waiting = running + got[0], waiting + got[1]
        queue.samples.append((round(time.perf_counter() - began, 2), running, waiting))
        await asyncio.sleep(0.2)


async def run_pass(
    url: str,
    model: str,
    n: int,
    tokens: int,
    fault: str = "",
    ports: tuple[int, ...] = (),
    after_events: int = 8,
    queue: Queue | None = None,
) -> list[Stream]:
    streams = [Stream() for _ in range(n)]
    sampler: asyncio.Task[None] | None = None
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(600.0), limits=httpx.Limits(max_connections=n + 4)
    ) as c:
        tasks = [asyncio.create_task(one(c, url, body(model, i, tokens), s)) for i, s in enumerate(streams)]
        group = 0
        if fault:

            async def started() -> bool:
                return all(s.events >= after_events or s.error for s in streams)

            if not await until_true(started, 300, 0.05):
                raise TimeoutError("the streams did not start within 300 s")
            port = await busiest(c, list(ports))
            group = group_of(port)
            os.killpg(group, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
            log.info("replica on port %d: %s", port, "killed (-9)" if fault == "kill" else "frozen (SIGSTOP)")
            if queue is not None:
                queue.survivors = [p for p in ports if p != port]
                sampler = asyncio.create_task(sample_queue(c, queue.survivors, queue, time.perf_counter()))
        try:
            await asyncio.gather(*tasks)
        finally:
            if sampler is not None:
                sampler.cancel()
            if fault == "stop" and group:
                os.killpg(group, signal.SIGCONT)
    return streams


def quantile(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def stall_totals(metrics: str) -> tuple[float, float]:
    """The gateways' stall histogram: (sum, count)."""
    total = count = 0.0
    for line in metrics.splitlines():
        if line.startswith("llmgw_migration_stall_seconds_sum"):
            total += float(line.split()[-1])
        if line.startswith("llmgw_migration_stall_seconds_count"):
            count += float(line.split()[-1])
    return total, count


def moves_in(logs: list[Path], since: dict[Path, int]) -> dict[str, Any]:
    """The gateways' migration log lines written since ``since`` (moved on): from->to and why, counted."""
    pairs: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for log_file in logs:
        text = log_file.read_text(errors="replace")
        for line in text[since.get(log_file, 0) :].splitlines():
            if " migration " in line:
                what = line.split(" migration ", 1)[1]
                fields = dict(f.split("=", 1) for f in what.split() if "=" in f and "reason=" not in f)
                pairs[
                    f"{what.split(':')[0]} {fields.get('from')}->{fields.get('to')} #{fields.get('attempt')}"
                ] += 1
                reasons[what.split("reason=", 1)[-1][:60]] += 1
        since[log_file] = len(text)
    return {"moves": dict(pairs), "reasons": dict(reasons)}


def report(
    ref: list[Stream], hit: list[Stream], metrics: tuple[str, str], fault: str, queue: Queue
) -> dict[str, Any]:
    added = [h.max_gap - r.max_gap for r, h in zip(ref, hit, strict=True) if not h.error]
    (sum0, count0), (sum1, count1) = (stall_totals(m) for m in metrics)  # this pass: after less before
    stall_sum, stall_count = sum1 - sum0, count1 - count0
    # the moved streams: as many as the gateway moved, those with the largest added gap (the survivors'
    # own streams slow down too, by the continuations' prefill, but by far less)
    moved = sorted(added, reverse=True)[: int(stall_count)]
    out = {
        "fault": fault, "streams": len(hit), "errors": sum(1 for h in hit if h.error),
        "byte_identical": sum(1 for r, h in zip(ref, hit, strict=True) if h.text == r.text and not h.error),
        "reference_errors": sum(1 for r in ref if r.error),
        "ttft_p50_s": round(statistics.median([r.ttft_s for r in ref]), 3),
        "streams_stalled": len(moved),
        "others_added_gap_max_s": round(max(sorted(added, reverse=True)[len(moved) :], default=0.0), 3),
        "stall_median_s": round(statistics.median(moved), 3) if moved else None,
        "stall_p90_s": round(quantile(moved, 0.9), 3) if moved else None,
        "stall_max_s": round(max(moved), 3) if moved else None,
        "gateway_stall_mean_s": round(stall_sum / stall_count, 3) if stall_count else None,
        "gateway_migrations": stall_count,
        "undisturbed_max_gap_p50_s": round(statistics.median([r.max_gap for r in ref]), 3),
        "undisturbed_max_gap_max_s": round(max(r.max_gap for r in ref), 3),
        **queue.summary(),
        "first_errors": [h.error for h in hit if h.error][:3],
    }  # fmt: skip
    return out


async def burst_reference(port: int, model: str, ref: list[Stream], a: argparse.Namespace) -> dict[str, Any]:
    """The continuations' work without the gateway, on the survivor alone (direct): half the streams
    of its own running (each past its 8th event), then the other half's continuations as plain
    completions sent at once (prompt ids = the chat prompt + the ids of its answer's first 12 tokens);
    their TTFT is the re-prefill the stall cannot be shorter than."""
    base, half = f"http://127.0.0.1:{port}", a.streams // 2
    headers = {"authorization": f"Bearer {a.vllm_key}"} if a.vllm_key else {}
    limits = httpx.Limits(max_connections=a.streams + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), headers=headers, limits=limits) as c:
        prompts = []
        for i in range(half, a.streams):
            chat = {"model": model, "messages": body(model, i, 1)["messages"], "add_generation_prompt": True}
            answer = {"model": model, "prompt": ref[i].text[:80], "add_special_tokens": False}
            ids = [(await c.post(f"{base}/tokenize", json=q)).json()["tokens"] for q in (chat, answer)]
            prompts.append(ids[0] + ids[1][:12])
        running = [Stream() for _ in range(half)]
        tasks = [
            asyncio.create_task(one(c, base, body(model, i, a.tokens), s)) for i, s in enumerate(running)
        ]

        async def started() -> bool:
            return all(s.events >= 8 or s.error for s in running)

        await until_true(started, 300, 0.05)
        req = {"model": model, "max_tokens": 4, "temperature": 0, "stream": True}
        burst = [Stream() for _ in prompts]
        runs = [
            one(c, base, {**req, "prompt": p}, s, "completions") for p, s in zip(prompts, burst, strict=True)
        ]
        await asyncio.gather(*runs)
        for t in tasks:
            t.cancel()
    ttft = sorted(s.ttft_s for s in burst if not s.error)
    return {
        "burst_prompt_tokens": round(statistics.mean(len(p) for p in prompts)),
        "burst_ttft_median_s": round(statistics.median(ttft), 3) if ttft else None,
        "burst_ttft_max_s": round(ttft[-1], 3) if ttft else None,
        "burst_errors": [s.error for s in burst if s.error][:3],
    }


async def check(
    url: str, model: str, ports: list[int], gateways: list[str], a: argparse.Namespace
) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    seen: dict[Path, int] = {}
    if a.logs is not None:
        moves_in(sorted(a.logs.glob("gateway*.log")), seen)
    for fault in a.fault:
        ref = await run_pass(url, model, a.streams, a.tokens)
        queue = Queue()
        before = await scrape(gateways)
        hit = await run_pass(url, model, a.streams, a.tokens, fault, tuple(ports), queue=queue)
        results.append(report(ref, hit, (before, await scrape(gateways)), fault, queue))
        if a.logs is not None:
            results[-1].update(moves_in(sorted(a.logs.glob("gateway*.log")), seen))
        if fault == "kill" and a.burst and queue.survivors:
            try:
                results[-1].update(await burst_reference(queue.survivors[0], model, ref, a))
            except (httpx.HTTPError, KeyError, ValueError, TypeError) as exc:  # the reference only: said
                results[-1]["burst_error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(results[-1]), flush=True)
        if fault == "kill" and fault != a.fault[-1]:
            await until_ready(url, model, len(ports))
    return results


async def scrape(gateways: list[str]) -> str:
    async with httpx.AsyncClient() as c:
        return "".join([(await c.get(f"{g}/metrics")).text for g in gateways])


async def until_ready(url: str, model: str, want: int, deadline_s: float = 600) -> None:
    """The killed replica back (the supervisor restarts it) before the next fault."""
    end = time.monotonic() + deadline_s
    async with httpx.AsyncClient() as c:
        while time.monotonic() < end:
            r = await c.get(f"{url}/ready")
            if r.json().get("models", {}).get(model, {}).get("ready_replicas", 0) >= want:
                return
            await asyncio.sleep(1)
    raise TimeoutError("the killed replica did not come back")


def cpu_fleet(tmp: Path, max_num_seqs: int = 0) -> Path:
    """The default fleet's SmolLM2 alone (two replicas), on ports of its own; ``max_num_seqs``: vLLM's
    ``--max-num-seqs`` instead of the launcher's (8: as before the migration headroom)."""
    data = yaml.safe_load((REPO / "fleet.yaml").read_text())
    data["models"] = [m for m in data["models"] if m["name"] == "smollm2-135m-instruct"]
    if max_num_seqs:
        engine = data["models"][0]["engine"]
        engine["extra_args"] = [*engine.get("extra_args", []), "--max-num-seqs", str(max_num_seqs)]
    data.setdefault("defaults", {})["base_port"] = 18500
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def main_async(a: argparse.Namespace) -> list[dict[str, Any]]:
    if not a.cpu:
        ports = [int(p) for p in a.replica_ports.split(",")]
        results = await check(a.url, a.model, ports, [a.url], a)
    else:
        with tempfile.TemporaryDirectory(prefix="llmgw-migration-") as tmp:
            env = {"LLMGW_MIGRATION_STALL_S": str(a.stall_s)}
            config = StackConfig(
                fleet_file=cpu_fleet(Path(tmp), a.max_num_seqs), run_dir=Path(tmp) / "run",
                redis_port=free_port(),
                keys_redis_port=free_port(), gateway_ports=(free_port(),), nginx_port=free_port(),
                prometheus_port=0, supervisor_metrics_port=free_port(), ready_deadline_s=900, gateway_env=env,
            )  # fmt: skip
            stack = Stack(config)
            try:
                log.info("starting two SmolLM2 replicas (a minute or two)")
                await stack.up()
                a.vllm_key, a.logs = config.vllm_api_key, config.run_dir / "logs"
                gw = f"http://127.0.0.1:{config.gateway_ports[0]}"
                results = await check(gw, "smollm2-135m-instruct", [18500, 18501], [gw], a)
            finally:
                await stack.down()
    return results


def passed(results: list[dict[str, Any]]) -> bool:
    return all(r["errors"] == 0 and r["byte_identical"] == r["streams"] for r in results)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="migration_check", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    p.add_argument("--cpu", action="store_true", help="start its own stack: two SmolLM2 replicas")
    p.add_argument("--url", default="http://127.0.0.1:9000")
    p.add_argument("--model", default="llama-2-7b")
    p.add_argument("--replica-ports", default="8100,8101", help="the busiest of them fails")
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--fault", action="append", choices=["kill", "stop"], help="default: kill, then stop")
    p.add_argument("--stall-s", type=float, default=2.0, help="--cpu: the gateway's migration_stall_s")
    p.add_argument("--max-num-seqs", type=int, default=0, help="--cpu: vLLM's, instead of the launcher's")
    p.add_argument("--no-burst", dest="burst", action="store_false", help="skip the re-prefill reference")
    p.add_argument("--logs", type=Path, default=None, help="the gateways' log directory (moves counted)")
    p.add_argument("--vllm-key", default=os.environ.get("VLLM_API_KEY", ""), help="the replicas' API key")
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    a.fault = a.fault or ["kill", "stop"]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    results = asyncio.run(main_async(a))
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0 if passed(results) else 1


if __name__ == "__main__":
    sys.exit(main())
