"""The short form of `make chaos` (bench/chaos.py) on the shared real stack: mixed load through nginx
while non-streamed requests generate past the first-byte timeout, a vLLM replica is killed -9, a gateway
and Redis are killed -9 and started again, a replica is frozen longer than the gateways' timeouts, and
the supervisor is killed -9 and started again (it adopts its replicas). Nothing may be lost: every
request is answered or gets a clear error; no generation runs twice (counted at the engines, from
vLLM's request log). The stack is back at full strength after each phase. (The replica that fails every
start, which waits for a new vLLM to start, runs in `make chaos` only.)"""

from __future__ import annotations

import pytest

from bench.chaos import Plan, run_chaos
from bench.faults.checks import CUT, LOST
from llmgw_tools.stack.stack import Stack

pytestmark = pytest.mark.e2e

PHASES = [
    "baseline",
    "long non-streamed",
    "kill -9 vLLM replica",
    "kill -9 gateway",
    "kill -9 Redis (state)",
    "freeze replica",
    "kill -9 supervisor",
]


async def test_fault_matrix_loses_nothing_and_runs_nothing_twice(stack: Stack) -> None:
    plan = Plan(phase_s=20, concurrency=4, freeze_s=25, max_tokens=16)
    results = await run_chaos(stack, plan, PHASES)
    assert [r.name for r in results] == PHASES
    lost = {r.name: r.tally.lost for r in results if r.tally.total(LOST)}
    # A stream cut by a killed process is seen by the client (an incomplete chunked body), never silent;
    # only the gateway kill may leave one (nginx cannot append an error to a body it started).
    assert all(not r.tally.total(CUT) for r in results if r.name != "kill -9 gateway")
    assert lost == {}
    assert {r.name: r.engine.ran_twice for r in results if r.engine.ran_twice} == {}
    assert {r.name: r.problems for r in results if r.problems} == {}  # long ones answered past the
    # first-byte timeout; the supervisor adopted its replicas
    assert all(r.tally.total("answered") > 0 for r in results)
    assert all(r.engine.ids for r in results)  # counted at the engines
