"""The one drain: once a replica is published DRAINING, wait until every gateway has seen it, then until
vLLM has nothing running or waiting and its API server holds no request (``/load``), within the grace
period (:class:`RegistryTiming` sets all three). A ``/metrics`` that cannot be read counts as unknown,
never as idle: the drain then waits to the grace period.

The supervisor and the registration sidecar call :func:`wait_until_idle`; a vLLM container's preStop hook
runs :data:`DRAIN_SCRIPT` (the vLLM image has python3 but not this code) with the same numbers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import httpx

from llmgw_contract.registry import RegistryTiming
from llmgw_contract.vllm_metrics import RUNNING, WAITING
from llmgw_contract.vllm_probe import requests_in_engine

log = logging.getLogger("llmgw.drain")


async def wait_until_idle(client: httpx.AsyncClient, urls: Sequence[str], timing: RegistryTiming) -> bool:
    """True when every server went idle within the grace period, False when the grace ran out."""
    deadline = time.monotonic() + timing.drain_grace_s
    await asyncio.sleep(min(timing.drain_settle_s, timing.drain_grace_s))
    while True:
        counts = await asyncio.gather(*(requests_in_engine(client, u) for u in urls))
        if all(c == 0 for c in counts):
            return True
        if time.monotonic() >= deadline:
            unknown = sum(c is None for c in counts)
            log.warning("drain grace of %.0f s ran out with %d requests in flight (%d replicas unreadable)",
                        timing.drain_grace_s, sum(c or 0 for c in counts), unknown)  # fmt: skip
            return False
        await asyncio.sleep(timing.drain_poll_s)


# argv: grace_s, url, settle_s, poll_s (drain_argv renders them from a RegistryTiming).
DRAIN_SCRIPT = f"""\
import json, sys, time, urllib.request
grace, url, settle, poll = float(sys.argv[1]), sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
end = time.monotonic() + grace
time.sleep(min(settle, grace))
def busy():
    try:
        text = urllib.request.urlopen(url + "/metrics", timeout=2).read().decode()
    except Exception:
        return 1.0  # unknown is not idle: wait to the grace period
    names = ("{RUNNING}", "{WAITING}")
    engine = sum(float(ln.rsplit(" ", 1)[-1]) for ln in text.splitlines() if ln.startswith(names))
    try:  # requests the API server holds that the engine has not taken yet
        load = json.loads(urllib.request.urlopen(url + "/load", timeout=2).read())
        held = float(load.get("server_load", 0))
    except Exception:
        held = 0.0
    return max(engine, held)
while time.monotonic() < end and busy() > 0:
    time.sleep(poll)
"""


def drain_argv(python: str, url: str, timing: RegistryTiming) -> list[str]:
    """The preStop command that runs :data:`DRAIN_SCRIPT` against ``url`` with ``timing``'s numbers."""
    grace, settle, poll = timing.drain_grace_s, timing.drain_settle_s, timing.drain_poll_s
    return [python, "-c", DRAIN_SCRIPT, f"{grace:g}", url, f"{settle:g}", f"{poll:g}"]
