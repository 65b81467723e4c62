"""The lifespan's background loops (gateway/periodic.py) through llmgw_contract.supervision: a step that
raises is logged with its traceback and counted, and its loop goes on; close stops every loop."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.periodic import Background
from testing.poll import until


async def test_a_failing_step_is_logged_counted_and_its_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR)
    calls: list[int] = []
    failures: list[tuple[str, str]] = []

    async def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")

    bg = Background(failed=lambda action, subject: failures.append((action, subject)))
    bg.start(0.01, flaky, "flaky")
    await until(lambda: len(calls) >= 3, 5.0, "the loop going on after a failure")
    await bg.close()
    assert failures == [("flaky", "")]
    assert "RuntimeError: boom" in caplog.text and "action=flaky" in caplog.text
    done = len(calls)
    await asyncio.sleep(0.05)
    assert len(calls) == done  # closed: no step runs any more
