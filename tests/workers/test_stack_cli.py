"""`llmgw-stack` for real (Redis, supervisor, two gateways, nginx, Prometheus) with a fleet whose one
model is served elsewhere (the FAKE ENGINE), so no vLLM is needed: it reaches READY, serves through
nginx, and SIGTERM stops everything it started; with each state-Redis topology (``--redis``)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from llmgw_tools.stack.redis_topology import KINDS
from testing.procs import free_port, port_open, spawn, start_fake_engine, wait_for_line, wait_until


@pytest.mark.parametrize("redis", KINDS)
def test_stack_serves_then_sigterm_leaves_nothing_running(tmp_path: Path, redis: str) -> None:
    engine = start_fake_engine(tmp_path, "--model", "ext-model")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        f"models:\n - name: ext-model\n   aliases: [ext]\n"
        f"   endpoints: [{{url: '{engine.url}', auth: none}}]\n"
    )
    ports = {
        "port": free_port(),
        "gateway-port": free_port(),
        "redis-port": free_port(),
        "keys-redis-port": free_port(),
        "prometheus-port": free_port(),
        "supervisor-port": free_port(),
    }
    flags = [x for k, v in ports.items() for x in (f"--{k}", str(v))]
    run_dir = str(tmp_path / "run")
    argv = [
        sys.executable,
        "-m",
        "llmgw_tools.stack.cli",
        "--fleet",
        str(fleet),
        "--run-dir",
        run_dir,
        "--gateways",
        "1",
        "--redis",
        redis,
        *flags,
    ]
    log = tmp_path / "stack.log"
    stack = spawn(argv, ports["port"], log)
    try:
        wait_for_line(stack, "READY", 60, "llmgw-stack")
        children = psutil.Process(stack.popen.pid).children(recursive=True)
        assert len(children) >= 5  # redis, supervisor, gateway, nginx (master + worker), prometheus
        body = {"model": "ext", "messages": [{"role": "user", "content": "hi"}]}
        r = httpx.post(f"http://127.0.0.1:{ports['port']}/v1/chat/completions", json=body, timeout=10)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
        stack.popen.send_signal(signal.SIGTERM)
        assert stack.popen.wait(60) == 0

        def gone() -> bool:
            return not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]

        wait_until(gone, 10, "every child of the stack gone")
        assert not any(port_open(p) for p in ports.values())
    finally:
        stack.stop()  # SIGTERM first: the stack stops its services (each in its own session) itself
        engine.stop()
