"""The one reader of vLLM's Prometheus text: sums of gauges over the series a replica exports."""

from __future__ import annotations

import re

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
_SAMPLE = re.compile(rb"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})? ([0-9.eE+-]+|NaN|[+-]Inf)", re.MULTILINE)


def gauge_sums(text: bytes | str) -> dict[str, float]:
    """Each metric name mapped to the sum of its samples (labels summed over; comments skipped)."""
    raw = text.encode() if isinstance(text, str) else text
    sums: dict[str, float] = {}
    for name, value in _SAMPLE.findall(raw):
        key = name.decode()
        sums[key] = sums.get(key, 0.0) + float(value)
    return sums


_CACHE_INFO = re.compile(rb"^vllm:cache_config_info\{([^}]*)\}", re.MULTILINE)
_LABEL = re.compile(rb'(\w+)="([^"]*)"')


def kv_cache_tokens(text: bytes | str) -> int:
    """The KV cache's size in tokens, ``num_gpu_blocks`` × ``block_size`` of ``vllm:cache_config_info``
    summed over the server's engines; 0 when the series is missing or its labels are not numbers."""
    raw = text.encode() if isinstance(text, str) else text
    total = 0
    for labels in _CACHE_INFO.findall(raw):
        found = {k.decode(): v.decode() for k, v in _LABEL.findall(labels)}
        blocks, size = found.get("num_gpu_blocks", ""), found.get("block_size", "")
        if blocks.isdigit() and size.isdigit():
            total += int(blocks) * int(size)
    return total


def running_and_waiting(text: bytes | str) -> tuple[int, int]:
    """vLLM's requests in its batches and in its own queue, over every engine of the server."""
    sums = gauge_sums(text)
    return int(sums.get(RUNNING, 0.0)), int(sums.get(WAITING, 0.0))


PROGRESS = (
    "vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:iteration_tokens_total_count",
    "vllm:request_success_total", "vllm:prefix_cache_queries_total", "vllm:num_preemptions_total",
    RUNNING, WAITING, "vllm:kv_cache_usage_perc",
)  # fmt: skip
"""The series that move while a replica works: its token and request counters (one engine step advances
some of them; a chunked prefill moves the KV cache's usage), its batch and queue sizes."""


def progress_mark(text: bytes | str) -> tuple[float, ...]:
    """The values of :data:`PROGRESS` (0 for a series the replica lacks): a replica whose mark is the same
    at two scrapes made no progress between them that its metrics show."""
    sums = gauge_sums(text)
    return tuple(sums.get(name, 0.0) for name in PROGRESS)
