"""Issue 30 on the H200: N concurrent streams through the gateway, one replica killed (``kill -9`` of its
process group) once every stream has tokens. Against a running gateway (bench/gpu/migration.sh):

- reference 1: the N targets alone, all in flight (texts, token ids, TTFT);
- reference 2 (``--neighbours M``): the targets in reverse order beside M other requests, so the batch
  around each target differs; only targets identical in both references count for byte identity (a
  near-tie's text depends on the batch around it: /work/shared/gpu/NOTES.md);
- the pass with the fault: errors, byte identity against reference 1, and the seam check that does not
  depend on numerics, per stream: one ``finish_reason``, usage sent once, ``completion_tokens`` = the
  token ids the client received (``ignore_eos``: = ``--tokens``), ``prompt_tokens`` = the reference's;
- the stall of each migrated stream (the gateway's log names them and the seam's token offset:
  ``request_id=MODEL-hit-I ... migration moved ... offset=N``): the gap at the seam (the last event with
  at most N token ids to the next one; events the gateway read before the kill reach the client after
  it), against reference 1's TTFT p50, and for the streams that stayed the longest gap in the 3 s after
  the kill (the pause while their replica prefilled the newcomers);
- where a stream's token ids first differ from reference 1, against its seam (``differ_*``).

    python -m bench.gpu.migration_gpu --url http://127.0.0.1:9000 --model llama-2-7b \\
        --replica-ports 8100,8101 --prompts story --gateway-log /tmp/run-migration/gateway.log
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped]

from bench.migration_check import busiest, quantile

TOPICS = ["rivers", "bridges", "volcanoes", "libraries", "trains", "gardens", "deserts", "lighthouses"]
FORMS = [
    "Explain step by step how {} are studied by scientists, and why it matters.",
    "Write a short story about two friends who discover something unusual about {}.",
    "List ten surprising facts about {}, with one sentence of explanation each.",
    "Describe the history of {} in Europe for a curious ten-year-old.",
    "What are the most common misconceptions about {}? Answer in detail.",
    "Compare {} in the nineteenth century with today, point by point.",
    "Write a poem in four stanzas about {} at night.",
    "Give practical advice to someone who wants to learn more about {}.",
]
TEXTS = [f.format(t) for f in FORMS for t in TOPICS]


@dataclass
class Capture:
    """What the client saw of one stream."""

    text: str = ""
    ids: list[int] = field(default_factory=list)
    error: str = ""
    finishes: int = 0
    usages: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # perf_counter of every event
    counts: list[int] = field(default_factory=list)  # len(ids) after each event (beside ``times``)
    sent: float = 0.0

    @property
    def ttft_s(self) -> float:
        return self.times[0] - self.sent if self.times else 0.0

    def gap_over(self, t: float) -> float:
        """The gap between the last event before ``t`` and the first after it (0 when none spans it)."""
        before = [x for x in self.times if x <= t]
        after = [x for x in self.times if x > t]
        return after[0] - before[-1] if before and after else 0.0

    def seam_gap(self, offset: int) -> float:
        """The gap between the last event with at most ``offset`` token ids and the next one: the stall
        a moved stream's client saw at the seam (``offset``: the gateway's log line). Events the gateway
        had read before the kill still reach the client after it, so the gap around the kill's own time
        is not the seam's."""
        k = next((k for k, n in enumerate(self.counts) if n > offset), 0)
        return self.times[k] - self.times[k - 1] if k > 0 else 0.0

    def longest_gap(self, start: float, end: float) -> float:
        """The longest gap between two events that both fall in ``[start, end]``."""
        ts = [t for t in self.times if start <= t <= end]
        return max((b - a for a, b in itertools.pairwise(ts)), default=0.0)


def group_on(port: int) -> int:
    """The process group of the server listening on ``port`` (vLLM and its engine core; the supervisor
    starts each replica in a group of its own)."""
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            return os.getpgid(conn.pid)
    raise LookupError(f"nothing listens on port {port}")


def prompt(kind: str, i: int) -> str:
    if kind == "text":
        return TEXTS[i % len(TEXTS)] + ("" if i < len(TEXTS) else f" (part {i // len(TEXTS) + 1})")
    return f"Story {i}: write a long story about a lighthouse and its keeper."


def body(model: str, text: str, tokens: int, ignore_eos: bool) -> dict[str, Any]:
    return {
        "model": model, "messages": [{"role": "user", "content": text}], "max_tokens": tokens,
        "temperature": 0, "ignore_eos": ignore_eos, "stream": True, "return_token_ids": True,
        "stream_options": {"include_usage": True},
    }  # fmt: skip


def take(frame: dict[str, Any], out: Capture) -> None:
    if "error" in frame:
        out.error = str(frame["error"].get("message", "error"))
        return
    if frame.get("usage"):
        out.usages.append(frame["usage"])
    for choice in frame.get("choices") or []:
        out.text += (choice.get("delta") or {}).get("content") or ""
        out.ids += choice.get("token_ids") or []
        out.finishes += choice.get("finish_reason") is not None


async def stream(client: httpx.AsyncClient, url: str, req: dict[str, Any], rid: str, out: Capture) -> None:
    """One chat stream through the gateway, read line by line (each ``data:`` line is one event)."""
    out.sent = time.perf_counter()
    headers = {"x-request-id": rid}
    try:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=req, headers=headers) as r:
            if r.status_code != 200:
                out.error = f"status {r.status_code}: {(await r.aread())[:200]!r}"
                return
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    out.times.append(time.perf_counter())
                    if line == "data: [DONE]":
                        out.counts.append(len(out.ids))
                        return
                    take(json.loads(line[6:]), out)
                    out.counts.append(len(out.ids))
        out.error = out.error or "no [DONE]"
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"


async def neighbour(client: httpx.AsyncClient, url: str, model: str, i: int) -> None:
    """A request beside the targets in reference 2: another prompt, another length."""
    text = f"{TEXTS[(i * 7) % len(TEXTS)]} Then summarise it in {i % 9 + 2} sentences."
    req = body(model, text, 30 + (i * 37) % 270, True)
    await stream(client, url, req, f"nb-{i}", Capture())


async def run_pass(
    a: argparse.Namespace, label: str, order: list[int], fault: bool = False
) -> tuple[list[Capture], float]:
    caps = [Capture() for _ in range(a.streams)]
    limits = httpx.Limits(max_connections=a.streams + a.neighbours + 8)
    killed_at = 0.0
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as c:
        tasks = []
        for k, i in enumerate(order):
            req = body(a.model, prompt(a.prompts, i), a.tokens, a.ignore_eos)
            tasks.append(asyncio.create_task(stream(c, a.url, req, f"{a.model}-{label}-{i}", caps[i])))
            if label == "ref2" and k < a.neighbours:
                tasks.append(asyncio.create_task(neighbour(c, a.url, a.model, k)))
        if fault:
            end = time.monotonic() + 300
            while not all(len(s.times) >= a.after_events or s.error or s.finishes for s in caps):
                if time.monotonic() > end:
                    raise TimeoutError("the streams did not start within 300 s")
                await asyncio.sleep(0.02)
            port = await busiest(c, [int(p) for p in a.replica_ports.split(",")])
            killed_at = time.perf_counter()
            os.killpg(group_on(port), signal.SIGKILL)
            print(f"replica on port {port} killed (-9)", flush=True)
        await asyncio.gather(*tasks)
    return caps, killed_at


def seam_ok(ref: Capture, hit: Capture, a: argparse.Namespace) -> list[str]:
    """What is wrong with a stream's seam, independent of numerics (empty: nothing)."""
    wrong = []
    if hit.finishes != 1:
        wrong.append(f"{hit.finishes} finish_reasons")
    if len(hit.usages) != 1:
        wrong.append(f"usage sent {len(hit.usages)} times")
    usage = hit.usages[-1] if hit.usages else {}
    if usage.get("completion_tokens") != len(hit.ids):
        wrong.append(f"completion_tokens {usage.get('completion_tokens')} != {len(hit.ids)} ids received")
    if a.ignore_eos and len(hit.ids) != a.tokens:
        wrong.append(f"{len(hit.ids)} ids, not {a.tokens}")
    want = ref.usages[-1].get("prompt_tokens") if ref.usages else None
    if usage.get("prompt_tokens") != want:
        wrong.append(f"prompt_tokens {usage.get('prompt_tokens')} != reference {want}")
    return wrong


def moved_ids(log_path: str, model: str) -> dict[int, int]:
    """The targets the gateway moved and the token offset of each one's (first) seam: its ``migration
    moved ... offset=N`` lines for request_id=MODEL-hit-I."""
    text = Path(log_path).read_text(errors="replace") if log_path and Path(log_path).exists() else ""
    found = re.findall(rf"request_id={re.escape(model)}-hit-(\d+) .*migration moved.* offset=(\d+)", text)
    moved: dict[int, int] = {}
    for i, offset in found:
        moved.setdefault(int(i), int(offset))
    return moved


def dist(xs: list[float], unit: str = "_s") -> dict[str, float | int | None]:
    """n, median, p90 and max of ``xs`` (keys end in ``unit``)."""
    if not xs:
        return {"n": 0, f"median{unit}": None, f"p90{unit}": None, f"max{unit}": None}
    return {
        "n": len(xs), f"median{unit}": round(statistics.median(xs), 3),
        f"p90{unit}": round(quantile(xs, 0.9), 3), f"max{unit}": round(max(xs), 3),
    }  # fmt: skip


def first_diff(a: list[int], b: list[int]) -> int:
    """The index of the first id where ``a`` and ``b`` differ (the shorter length if one is a prefix)."""
    return next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def divergence(ref: list[Capture], hit: list[Capture], moved: dict[int, int]) -> dict[str, Any]:
    """Where the fault pass's token ids first differ from reference 1, against each stream's seam: a moved
    stream that differs before its seam differed before the gateway did anything; after it, the survivor's
    numerics (the continuation's prefill of the generated tokens, another batch) chose another token."""
    differ = [i for i in range(len(ref)) if hit[i].ids != ref[i].ids and not hit[i].error]
    after = [first_diff(hit[i].ids, ref[i].ids) - moved[i] for i in differ if i in moved]
    return {
        "differ_moved": sum(1 for i in differ if i in moved),
        "differ_stayed": sum(1 for i in differ if i not in moved),
        "differ_moved_before_seam": sum(1 for d in after if d < 0),
        "first_diff_minus_seam_moved": dist([float(d) for d in after], ""),
        "per_stream": {
            f"hit-{i}": {"moved": i in moved, "first_diff": first_diff(hit[i].ids, ref[i].ids),
                         "seam": moved.get(i), "ids": len(hit[i].ids)}
            for i in differ
        },
    }  # fmt: skip


def report(
    a: argparse.Namespace, ref: list[Capture], ref2: list[Capture] | None, hit: list[Capture], at: float
) -> dict[str, Any]:
    n = range(a.streams)
    stable = [i for i in n if ref2 is None or (ref[i].text == ref2[i].text and ref[i].ids == ref2[i].ids)]
    moved = moved_ids(a.gateway_log, a.model)
    seams = {i: seam_ok(ref[i], hit[i], a) for i in n}
    ttft = statistics.median([r.ttft_s for r in ref])
    return {
        "model": a.model, "prompts": a.prompts, "streams": a.streams, "tokens": a.tokens,
        "errors": sum(1 for h in hit if h.error), "first_errors": [h.error for h in hit if h.error][:3],
        "reference_errors": sum(1 for r in ref + (ref2 or []) if r.error),
        "reference_stable": len(stable),
        "byte_identical_of_stable": sum(1 for i in stable if hit[i].text == ref[i].text and not hit[i].error),
        "byte_identical_all": sum(1 for i in n if hit[i].text == ref[i].text and not hit[i].error),
        "ids_identical_all": sum(1 for i in n if hit[i].ids == ref[i].ids and not hit[i].error),
        "distinct_reference_texts": len({r.text for r in ref}),
        "distinct_reference_tokens": len({t for r in ref for t in r.ids}),
        "seam_ok": sum(1 for w in seams.values() if not w),
        "seam_problems": {f"hit-{i}": w for i, w in seams.items() if w},
        "ttft_p50_s": round(ttft, 3), "ttft_p90_s": round(quantile([r.ttft_s for r in ref], 0.9), 3),
        "moved": len(moved),
        "stall_moved": dist([hit[i].seam_gap(o) for i, o in sorted(moved.items())]),
        "stall_moved_minus_ttft_p50": dist([hit[i].seam_gap(o) - ttft for i, o in sorted(moved.items())]),
        "gap_around_kill_moved": dist([hit[i].gap_over(at) for i in sorted(moved)]),
        "gap_stayed": dist([hit[i].longest_gap(at - 0.1, at + 3.0) for i in n if i not in moved]),
        "events_before_kill_moved": dist([float(sum(1 for t in hit[i].times if t <= at)) for i in moved], ""),
        "batch_invariant": os.environ.get("VLLM_BATCH_INVARIANT", "0") == "1",
        **divergence(ref, hit, moved),
    }  # fmt: skip


async def main_async(a: argparse.Namespace) -> dict[str, Any]:
    order = list(range(a.streams))
    ref, _ = await run_pass(a, "ref", order)
    print(f"reference 1: {sum(1 for r in ref if r.error)} errors", flush=True)
    ref2 = None
    if a.neighbours:
        ref2, _ = await run_pass(a, "ref2", order[::-1])
        print(f"reference 2: {sum(1 for r in ref2 if r.error)} errors", flush=True)
    hit, at = await run_pass(a, "hit", order, fault=True)
    await asyncio.sleep(1.0)  # the gateway's log lines of the last moves
    return report(a, ref, ref2, hit, at)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="migration_gpu", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:9000")
    p.add_argument("--model", default="llama-2-7b")
    p.add_argument("--replica-ports", default="8100,8101", help="the busiest of them is killed")
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--prompts", choices=["story", "text"], default="story")
    p.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--neighbours", type=int, default=0, help="reference 2 beside this many other requests")
    p.add_argument("--after-events", type=int, default=8, help="kill once every stream has this many")
    p.add_argument("--gateway-log", default="", help="the gateway's log: which streams it moved")
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    result = asyncio.run(main_async(a))
    print(json.dumps(result), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    ok = result["errors"] == 0 and result["seam_ok"] == a.streams
    return 0 if ok and result["byte_identical_of_stable"] == result["reference_stable"] else 1


if __name__ == "__main__":
    sys.exit(main())
