"""The scaler-push benchmark's short form: the real llmgw-scaler process, four FAKE gateways' waits through
the real admission script, every push seen and the p99 within the issue's 1 s."""

from __future__ import annotations

from bench.scaler_push import TARGET_P99_S, Options, bench


async def test_scaler_push_short_form() -> None:
    o = Options(trials=10)
    result = await bench(o)
    print(result.line(o))
    assert len(result.latencies_s) == 10
    assert result.quantile(0.99) <= TARGET_P99_S
