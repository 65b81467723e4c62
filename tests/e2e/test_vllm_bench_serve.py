"""vLLM's own serving benchmark (``vllm bench serve``, run in-process by :mod:`bench.vllm_serve`) through
nginx and the two gateways to the real SmolLM2 CPU replicas: the ``random`` dataset over chat completions
and the ``prefix_repetition`` dataset over completions with open-loop Poisson arrivals. Every request must
complete: none failed."""

from __future__ import annotations

import pytest

from bench.vllm_serve import ServeBench, run
from llmgw_tools.stack.stack import Stack

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("dataset", "backend", "rate"),
    [("random", "openai-chat", float("inf")), ("prefix_repetition", "openai", 4.0)],
)
def test_vllm_bench_serve_through_nginx(stack: Stack, dataset: str, backend: str, rate: float) -> None:
    spec = ServeBench(
        base_url=stack.config.nginx_url,
        dataset=dataset,
        backend=backend,
        num_prompts=16,
        request_rate=rate,
        output_len=8,
        random_input_len=128,
        prefix_len=256,
        suffix_len=32,
        num_prefixes=4,
    )
    result = run(spec)
    assert result.errors == []
    assert (result.completed, result.failed) == (16, 0)
    assert result.ttft_p90_ms > 0
