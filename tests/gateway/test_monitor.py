"""Load scraping: vLLM's gauges parsed from a real-looking /metrics page."""

from __future__ import annotations

from gateway.monitor import RUNNING, WAITING, gauge_sum
from gateway.pool import Endpoint
from gateway.replica import ReplicaRecord

PAGE = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 7.0
"""


def test_gauges_are_parsed_and_by_reason_series_ignored() -> None:
    assert gauge_sum(RUNNING, PAGE) == 3
    assert gauge_sum(WAITING, PAGE) == 2


def test_load_counts_other_gateways_through_vllm_running() -> None:
    ep = Endpoint(ReplicaRecord(id="r", model="m", url="http://x"))
    ep.inflight, ep.running, ep.waiting = 1, 3, 2
    assert ep.load == 5  # another gateway's two requests are seen through vLLM
    ep.inflight = 4
    assert ep.load == 6  # our own count is fresher than the last scrape
