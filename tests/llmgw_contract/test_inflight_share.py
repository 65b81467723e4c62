"""Reading the gateways' shared in-flight counts: fresh values summed per replica, stale and malformed
ones skipped."""

from __future__ import annotations

from llmgw_contract.inflight_share import fresh_counts


def test_fresh_values_are_summed_and_stale_or_malformed_ones_skipped() -> None:
    values = [b'1000 {"a-0": 2, "b-0": 0}', '1500 {"a-0": 1}', b'1 {"a-0": 9}', b"oops", b'2000 ["x"]']
    assert fresh_counts(values, now_ms=2000, max_age_ms=1500) == {"a-0": 3}
