"""The embedded stack keeps its services up: a service that dies is started again with a growing
back-off, and says so (real processes: the FAKE ENGINE as the service, and one that always dies)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

import pytest

from llmgw_tools.stack.keeper import KeepPolicy, keep
from llmgw_tools.stack.services import Service, http_probe
from testing.poll import until
from testing.procs import free_port

POLICY = KeepPolicy(base_s=0.1, max_s=0.4, healthy_after_s=60, ready_deadline_s=15)


async def test_a_dead_service_is_restarted_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    port = free_port()
    argv = [sys.executable, "-m", "testing.fake_engine", "--port", str(port)]
    svc = Service("gateway-1", argv, tmp_path / "svc.log", http_probe(f"http://127.0.0.1:{port}/health"))
    await svc.start()
    await svc.wait_until_ready(15)
    keeper = asyncio.create_task(keep(svc, POLICY))
    try:
        assert svc.proc is not None
        first = svc.proc.pid
        os.killpg(first, signal.SIGKILL)
        await until(lambda: "service=gateway-1 restarted, ready in" in caplog.text)
        assert svc.alive and svc.proc is not None and svc.proc.pid != first
        assert await http_probe(f"http://127.0.0.1:{port}/health")()
        assert "service=gateway-1 died (exit -9)" in caplog.text and "restart 1 in 0.1 s" in caplog.text
    finally:
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)
        await svc.stop()


async def test_a_service_that_always_dies_backs_off_and_caps(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    async def never() -> bool:
        return False

    svc = Service("redis", [sys.executable, "-c", "raise SystemExit(1)"], tmp_path / "r.log", never)
    await svc.start()
    keeper = asyncio.create_task(keep(svc, POLICY))
    try:
        await until(lambda: "restart 5 in" in caplog.text)
    finally:
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)
        await svc.stop()
    delays = [ln.rsplit(" in ", 1)[1] for ln in caplog.text.splitlines() if "service=redis died" in ln]
    assert delays[:5] == ["0.1 s", "0.2 s", "0.4 s", "0.4 s", "0.4 s"]
    assert "service=redis restart 1 failed: redis: exited with code 1 while starting" in caplog.text
