"""A histogram observed in batches exposes what observing each value exposes: the same buckets and count,
the same sum up to float rounding (added per batch)."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, Histogram

from gateway.batched_histogram import BATCH, BatchedHistogram

BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0)


def histogram() -> tuple[CollectorRegistry, Histogram]:
    registry = CollectorRegistry()
    return registry, Histogram("gaps_seconds", "gaps", ["model"], registry=registry, buckets=BUCKETS)


def test_a_batch_exposes_what_observing_each_value_exposes() -> None:
    rng = random.Random(7)
    values = [rng.choice([0.0, *BUCKETS, 3.0]) for _ in range(40)] + [rng.expovariate(20) for _ in range(300)]
    one_registry, one = histogram()
    batch_registry, batch = histogram()
    batched = BatchedHistogram(batch.labels("m"))
    for value in values:
        one.labels("m").observe(value)
        batched.observe(value)
    batched.flush()
    assert samples(batch_registry, "_sum") == pytest.approx(samples(one_registry, "_sum"))
    assert samples(batch_registry, "_bucket", "_count") == samples(one_registry, "_bucket", "_count")
    assert samples(one_registry, "_count") == {(("model", "m"),): len(values)}


def samples(registry: CollectorRegistry, *suffixes: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for metric in registry.collect()
        for s in metric.samples
        if s.name.endswith(suffixes)
    }


def test_values_reach_the_histogram_every_batch_and_at_the_flush() -> None:
    registry, hist = histogram()
    batched = BatchedHistogram(hist.labels("m"))

    def count() -> float | None:
        return registry.get_sample_value("gaps_seconds_count", {"model": "m"})

    for _ in range(BATCH - 1):
        batched.observe(0.002)
    assert count() == 0  # kept
    batched.observe(0.002)
    assert count() == BATCH  # a full batch is applied
    batched.observe(0.2)
    batched.flush()
    batched.flush()  # nothing left: no change
    assert count() == BATCH + 1
    assert registry.get_sample_value("gaps_seconds_bucket", {"model": "m", "le": "0.1"}) == BATCH
