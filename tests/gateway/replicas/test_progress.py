"""A replica's progress evidence and its learned stall bound (gateway/replicas/progress.py), pure logic."""

from __future__ import annotations

import pytest

from gateway.replicas.progress import GAP_WINDOW, Gaps, Progress
from llmgw_contract.vllm_metrics import PROGRESS, progress_mark


def test_counters_that_advance_are_progress() -> None:
    p = Progress()
    p.scraped((1.0, 2.0), 0.0)
    p.scraped((1.0, 9.0), 1.0)  # other clients' prefill: prompt tokens advance
    p.scraped((1.0, 9.0), 2.0)
    assert not p.quiet_since(0.5, bound=2.0)  # it advanced at 1.0: quiet for 1 s only
    p.scraped((1.0, 9.0), 3.0)
    assert p.quiet_since(0.5, bound=2.0)  # nothing since 1.0, scraped at 3.0: quiet for the bound


def test_without_a_scrape_since_there_is_no_evidence() -> None:
    p = Progress()
    p.scraped((1.0,), 0.0)
    assert not p.quiet_since(5.0, bound=1.0)  # nothing seen after the wait began: not proven stuck


def test_a_failed_probe_after_the_last_advance_is_evidence() -> None:
    p = Progress()
    p.scraped((1.0,), 0.0)
    p.failed(0.5)
    assert not p.quiet_since(1.0, bound=10.0)  # before the wait began
    p.failed(1.5)
    assert p.quiet_since(1.0, bound=10.0)
    p.scraped((2.0,), 2.0)  # it answered again, and advanced
    assert not p.quiet_since(1.0, bound=10.0)


def test_the_bound_is_learned_from_the_gaps_never_under_the_floor() -> None:
    g = Gaps()
    assert g.bound(5.0, 4.0) == 5.0
    for _ in range(99):
        g.add(0.1)
    g.add(3.0)  # one gap of 3 s in a hundred: the p99
    assert g.p99() == 3.0 and g.bound(5.0, 4.0) == 12.0
    for _ in range(GAP_WINDOW):
        g.add(0.05)  # the slow past falls out of the window
    assert g.bound(5.0, 4.0) == 5.0 and g.p99() == pytest.approx(0.05)


def test_the_progress_mark_reads_vllms_series() -> None:
    text = (
        "# HELP vllm:generation_tokens_total x\n"
        'vllm:generation_tokens_total{model_name="m",engine="0"} 10\n'
        'vllm:generation_tokens_total{model_name="m",engine="1"} 5\n'
        'vllm:num_requests_running{model_name="m"} 2\n'
        'vllm:iteration_tokens_total_count{model_name="m"} 7\n'
    )
    mark = dict(zip(PROGRESS, progress_mark(text), strict=True))
    assert mark["vllm:generation_tokens_total"] == 15.0 and mark["vllm:num_requests_running"] == 2.0
    assert mark["vllm:iteration_tokens_total_count"] == 7.0 and mark["vllm:prompt_tokens_total"] == 0.0
