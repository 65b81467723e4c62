"""The ``vllm bench serve`` wrapper's arguments (read by vLLM's own parser) and result summary."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.vllm_serve import ServeBench, parse, summarise


def test_vllms_parser_reads_the_prefix_repetition_arguments(tmp_path: Path) -> None:
    spec = ServeBench(
        base_url="http://127.0.0.1:9",
        tokenizer=tmp_path,
        num_prompts=32,
        request_rate=2.5,
        num_prefixes=4,
        result_file=tmp_path / "out.json",
    )
    args = parse(spec)
    assert (args.dataset_name, args.backend, args.endpoint) == (
        "prefix_repetition",
        "openai",
        "/v1/completions",
    )
    assert (args.model, args.served_model_name, args.tokenizer) == ("smollm2", "smollm2", str(tmp_path))
    assert (args.num_prompts, args.request_rate, args.prefix_repetition_num_prefixes) == (32, 2.5, 4)
    assert (args.prefix_repetition_prefix_len, args.prefix_repetition_output_len) == (512, 8)
    assert args.save_result and args.result_filename == "out.json"


def test_vllms_parser_reads_the_random_arguments(tmp_path: Path) -> None:
    spec = ServeBench(base_url="http://x", dataset="random", backend="openai-chat", tokenizer=tmp_path)
    args = parse(spec)
    assert (args.dataset_name, args.endpoint, args.random_input_len, args.random_output_len) == (
        "random",
        "/v1/chat/completions",
        128,
        8,
    )
    assert math.isinf(args.request_rate) and not args.save_result


@pytest.mark.parametrize(("field", "value"), [("dataset", "sharegpt"), ("backend", "tgi")])
def test_unknown_dataset_or_backend_is_refused(field: str, value: str) -> None:
    spec = ServeBench(base_url="http://x", tokenizer=Path("."), **{field: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=value):
        spec.argv()


def test_summary_keeps_the_counts_percentiles_and_distinct_errors() -> None:
    raw = {
        "completed": 15,
        "failed": 1,
        "duration": 4.0,
        "request_throughput": 3.75,
        "p50_ttft_ms": 100.0,
        "p90_ttft_ms": 200.0,
        "errors": ["", "HTTP 429", "HTTP 429", ""],
        "ttfts": [0.1, 0.0, 0.0, 0.3],
    }
    r = summarise(ServeBench(base_url="http://x", num_prompts=16), raw)
    assert (r.completed, r.failed, r.ttft_p50_ms, r.ttft_p90_ms, r.req_per_s) == (15, 1, 100.0, 200.0, 3.75)
    assert r.errors == ["HTTP 429"] and math.isnan(r.ttft_p99_ms)
    assert r.ttfts_s == [0.1, 0.3] and "ttfts_s" not in r.summary()
    assert "15/16 completed, 1 failed" in r.line()
