"""The per-request series of gateway/metrics.py: made on first use, then reused (``labels()`` takes a
lock and builds a key on every call), and none made for a model that never used them."""

from __future__ import annotations

from gateway.metrics import GatewayMetrics


def test_a_models_stream_gap_and_queue_depth_series_are_made_once_and_only_when_used() -> None:
    metrics = GatewayMetrics()
    metrics.series("m")  # the model's request series: no gap or depth series with them
    text = metrics.render().decode()
    assert (
        'llmgw_queue_depth{model="m"}' not in text
        and 'llmgw_inter_token_seconds_count{model="m"}' not in text
    )
    assert metrics.itl_of("m") is metrics.itl_of("m") is metrics.itl.labels("m")
    assert metrics.depth_of("m") is metrics.depth_of("m") is metrics.queue_depth.labels("m")
