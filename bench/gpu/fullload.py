"""Issue 21's GPU measurements, driven by vLLM's own benchmark (``vllm bench serve``), ON THE DEVICE.

``vllm bench serve`` fails on a version lookup in some builds, so this calls the same code,
``vllm.benchmarks.serve.add_cli_args`` / ``main``, in one process (no import per run).

``q1``: does the gateway cost anything at full load? The random dataset (256 in / 128 out, ``--ignore-eos``)
at each ``--levels`` in flight (``--max-concurrency``), direct to one vLLM and through the gateway,
interleaved (the order alternates each round), ``--rounds`` times; every run draws its own prompts (its
own seed), so no run hits another's prefix cache. Writes one JSON per run and ``q1-summary.json``: per
level the output tok/s of each run and the gateway ÷ direct ratio of each round, their median and spread.

``q2``: one run of ``--dataset-name prefix_repetition`` against two gateways (request *i* to gateway
*i* mod 2, one Poisson stream), with the replicas' prefix caches reset first; the replicas' vLLM counters
before and after give the prefix-cache hit rate and each replica's share. ``--probe`` runs it closed-loop
instead (``--max-concurrency``) to measure the pair's capacity in requests/s.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llmgw_contract.vllm_metrics import gauge_sums

HITS = "vllm:prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"
SUCCESS = "vllm:request_success_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
KEEP = (
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "output_throughput", "total_token_throughput", "max_concurrent_requests", "max_concurrency",
    "request_rate", "num_prompts", "seed",
)  # fmt: skip


def bench_args(argv: Sequence[str]) -> argparse.Namespace:
    """vLLM's own ``bench serve`` arguments, parsed by vLLM's own parser."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()  # type: ignore[no-untyped-call]
    add_cli_args(parser)
    args: argparse.Namespace = parser.parse_args(list(argv))
    return args


def run_bench(argv: Sequence[str]) -> dict[str, Any]:
    """One ``vllm bench serve`` run; its scalar results (latency percentiles included)."""
    from vllm.benchmarks.serve import main

    args = bench_args(argv)
    result: dict[str, Any] = main(args)
    out = {k: result.get(k) for k in KEEP if k in result}
    out.update({k: v for k, v in result.items() if k.endswith("_ms") and isinstance(v, (int, float))})
    out["seed"] = args.seed
    out["errors"] = sorted({e for e in result.get("errors", []) if e})[:5]
    return out


def common_args(base_url: str, model: str, tokenizer: str, seed: int) -> list[str]:
    return [
        "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", model, "--tokenizer", tokenizer, "--seed", str(seed), "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--num-warmups", "0",
    ]  # fmt: skip


# -- q1


def random_args(level: int, prompts_per_slot: int) -> list[str]:
    return [
        "--dataset-name", "random", "--random-input-len", "256", "--random-output-len", "128",
        "--ignore-eos", "--max-concurrency", str(level), "--request-rate", "inf",
        "--num-prompts", str(level * prompts_per_slot),
    ]  # fmt: skip


def ratio_stats(ratios: Sequence[float]) -> dict[str, Any]:
    return {
        "ratios": [round(r, 4) for r in ratios],
        "median": round(statistics.median(ratios), 4),
        "min": round(min(ratios), 4),
        "max": round(max(ratios), 4),
    }


def q1(a: argparse.Namespace) -> int:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    levels = [int(x) for x in a.levels.split(",")]
    urls = {"direct": a.direct, "gateway": a.gateway}
    tok: dict[str, dict[str, list[float]]] = {str(lv): {"direct": [], "gateway": []} for lv in levels}
    seeds = itertools.count(a.seed)
    for rnd in range(a.rounds):
        for level in levels:
            order = ["direct", "gateway"] if (rnd + levels.index(level)) % 2 == 0 else ["gateway", "direct"]
            for mode in order:
                argv = common_args(urls[mode], a.model, a.tokenizer, next(seeds)) + random_args(level, a.ppc)
                t0 = time.time()
                r = run_bench(argv)
                r.update(mode=mode, level=level, round=rnd, wall_s=round(time.time() - t0, 1))
                (out / f"q1-{level}-{mode}-r{rnd}.json").write_text(json.dumps(r, indent=1))
                tok[str(level)][mode].append(float(r["output_throughput"]))
                print(f"Q1 round={rnd} level={level} mode={mode} out_tok_s={r['output_throughput']:.1f} "
                      f"failed={r.get('failed')} ttft_p50={r.get('median_ttft_ms', 0):.0f}ms "
                      f"wall={r['wall_s']}s", flush=True)  # fmt: skip
            write_q1_summary(out, tok)
    return 0


def write_q1_summary(out: Path, tok: dict[str, dict[str, list[float]]]) -> None:
    summary: dict[str, Any] = {}
    for level, by_mode in tok.items():
        pairs = list(zip(by_mode["gateway"], by_mode["direct"], strict=False))
        if not pairs:
            continue
        summary[level] = {
            "direct_tok_s": [round(x, 1) for x in by_mode["direct"]],
            "gateway_tok_s": [round(x, 1) for x in by_mode["gateway"]],
            "ratio_per_round": ratio_stats([g / d for g, d in pairs]),
            "ratio_of_medians": round(
                statistics.median(by_mode["gateway"]) / statistics.median(by_mode["direct"]), 4
            ),
        }
    (out / "q1-summary.json").write_text(json.dumps(summary, indent=1))
    print("Q1 SUMMARY", json.dumps(summary), flush=True)


# -- q2


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        return gauge_sums(r.read())


def reset_prefix_cache(url: str) -> bool:
    """vLLM's dev endpoint (the replica needs VLLM_SERVER_DEV_MODE=1); False when it refused."""
    req = urllib.request.Request(f"{url}/reset_prefix_cache", data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return bool(r.status == 200)
    except OSError as exc:
        print(f"Q2 prefix cache reset on {url} failed: {exc}", flush=True)
        return False


def alternate_gateways(gateways: Sequence[str]) -> None:
    """Send request *i* of the run to gateway *i* mod n: wraps vLLM's completions request function."""
    from vllm.benchmarks.lib import endpoint_request_func as funcs

    inner: Callable[..., Any] = funcs.ASYNC_REQUEST_FUNCS["openai"]
    turn = itertools.cycle(gateways)

    async def alternating(request_func_input: Any, session: Any, pbar: Any = None) -> Any:
        routed = dataclasses.replace(request_func_input, api_url=f"{next(turn)}/v1/completions")
        return await inner(request_func_input=routed, session=session, pbar=pbar)

    funcs.ASYNC_REQUEST_FUNCS["openai"] = alternating  # the same dict object serve.py looks up


def counter_deltas(
    replicas: Sequence[str], before: Sequence[dict[str, float]], sent: int
) -> list[dict[str, float]]:
    """Each replica's counter increments once they count ``sent`` successes (or after 30 s)."""
    after: list[dict[str, float]] = list(before)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        after = [scrape(u) for u in replicas]
        if sum(x.get(SUCCESS, 0) - b.get(SUCCESS, 0) for x, b in zip(after, before, strict=True)) >= sent:
            break
        time.sleep(0.5)
    keys = (HITS, QUERIES, SUCCESS, PROMPT_TOKENS)
    return [{k: x.get(k, 0) - b.get(k, 0) for k in keys} for x, b in zip(after, before, strict=True)]


def prefix_args(a: argparse.Namespace) -> list[str]:
    args = [
        "--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", str(a.prefix_len),
        "--prefix-repetition-suffix-len", str(a.suffix_len), "--prefix-repetition-num-prefixes",
        str(a.num_prefixes), "--prefix-repetition-output-len", "128", "--ignore-eos",
        "--num-prompts", str(a.num_prompts),
    ]  # fmt: skip
    if a.probe:
        return [*args, "--request-rate", "inf", "--max-concurrency", str(a.probe)]
    return [*args, "--request-rate", str(a.rate), "--burstiness", "1.0"]


def q2(a: argparse.Namespace) -> int:
    gateways, replicas = a.gateways.split(","), a.replicas.split(",")
    reset = [] if a.probe else [reset_prefix_cache(u) for u in replicas]
    before = [scrape(u) for u in replicas]
    alternate_gateways(gateways)
    r = run_bench(common_args(gateways[0], a.model, a.tokenizer, a.seed) + prefix_args(a))
    delta = counter_deltas(replicas, before, int(r["completed"]))
    hits, queries = sum(d[HITS] for d in delta), sum(d[QUERIES] for d in delta)
    done = sum(d[SUCCESS] for d in delta) or 1
    r.update(
        policy=a.policy, probe=a.probe, cache_reset=reset, replicas=replicas, gateways=gateways,
        prefix_cache_hit_rate=round(hits / queries, 4) if queries else None,
        replica_hit_rate=[round(d[HITS] / d[QUERIES], 4) if d[QUERIES] else None for d in delta],
        replica_share=[round(d[SUCCESS] / done, 4) for d in delta], counters_delta=delta,
        workload={"prefix_len": a.prefix_len, "suffix_len": a.suffix_len, "num_prefixes": a.num_prefixes,
                  "num_prompts": a.num_prompts, "output_len": 128},
    )  # fmt: skip
    name = f"q2-probe-{a.policy}.json" if a.probe else f"q2-{a.policy}.json"
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / name).write_text(json.dumps(r, indent=1))
    print(f"Q2 {name} req_s={r['request_throughput']:.2f} out_tok_s={r['output_throughput']:.1f} "
          f"ttft_p50={r.get('median_ttft_ms', 0):.0f} p90={r.get('p90_ttft_ms', 0):.0f} "
          f"hit={r['prefix_cache_hit_rate']} share={r['replica_share']} failed={r.get('failed')}",
          flush=True)  # fmt: skip
    return 0


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gpu.fullload", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("q1", "q2"):
        s = sub.add_parser(name)
        s.add_argument("--model", default="llama-2-7b")
        s.add_argument("--tokenizer", default="/tmp/gpu-models/llama-2-7b")
        s.add_argument("--out", default="/tmp/run/results")
        s.add_argument("--seed", type=int, default=1000)
    s1 = sub.choices["q1"]
    s1.add_argument("--direct", default="http://127.0.0.1:8100")
    s1.add_argument("--gateway", default="http://127.0.0.1:9000")
    s1.add_argument("--levels", default="128,256,512")
    s1.add_argument("--rounds", type=int, default=3)
    s1.add_argument("--ppc", type=int, default=3, help="num_prompts = level x ppc")
    s2 = sub.choices["q2"]
    s2.add_argument("--gateways", default="http://127.0.0.1:9000,http://127.0.0.1:9001")
    s2.add_argument("--replicas", default="http://127.0.0.1:8100,http://127.0.0.1:8101")
    s2.add_argument("--policy", required=True, help="the policy the gateways run (a label here)")
    s2.add_argument("--rate", type=float, default=0.0, help="Poisson arrivals, requests/s")
    s2.add_argument("--probe", type=int, default=0, help="closed loop at this many in flight instead")
    s2.add_argument("--prefix-len", type=int, default=1024)
    s2.add_argument("--suffix-len", type=int, default=128)
    s2.add_argument("--num-prefixes", type=int, default=128)
    s2.add_argument("--num-prompts", type=int, default=1536)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    a = parse(argv)
    return q1(a) if a.cmd == "q1" else q2(a)


if __name__ == "__main__":
    sys.exit(main())
