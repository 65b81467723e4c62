"""The one parser of vLLM's metrics text, on a real-looking /metrics page."""

from __future__ import annotations

from llmgw_contract.vllm_metrics import gauge_sums, kv_cache_tokens, running_and_waiting

PAGE = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
process_open_fds 12
"""


def test_running_and_waiting_sum_every_engine_and_ignore_by_reason_series() -> None:
    assert running_and_waiting(PAGE) == (4, 2)


def test_gauges_are_summed_per_name_and_comments_skipped() -> None:
    sums = gauge_sums(PAGE.decode())
    assert sums["vllm:kv_cache_usage_perc"] == 0.25
    assert sums["process_open_fds"] == 12
    assert sums["vllm:num_requests_waiting_by_reason"] == 7
    assert not any(name.startswith("#") for name in sums)


def test_a_page_without_the_gauges_reads_as_idle() -> None:
    assert running_and_waiting(b"") == (0, 0)


def test_kv_cache_tokens_from_cache_config_info() -> None:
    text = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        'vllm:cache_config_info{block_size="128",cache_dtype="auto",engine="0",num_gpu_blocks="181"} 1.0\n'
        'vllm:cache_config_info{block_size="128",engine="1",num_gpu_blocks="10"} 1.0\n'
    )
    assert kv_cache_tokens(text) == 191 * 128
    assert kv_cache_tokens('vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n') == 0
    assert kv_cache_tokens("vllm:num_requests_running 3\n") == 0
