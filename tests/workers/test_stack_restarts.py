"""`llmgw-stack` keeps its services up (real Redis, gateways and nginx; the one model is the FAKE ENGINE,
served as an external endpoint, so no vLLM): a gateway, nginx and Redis killed with -9 under a steady
load (one client, one request at a time) are restarted and the stack serves again. Counted per kill:
a gateway kill loses at most the one request it had in flight (nginx sends the next ones to the other
gateway), a Redis kill none, an nginx master kill only connections while nginx is down (its workers live
on and are let finish their requests); every HTTP answer is a 200 or an error in the API's shape."""

from __future__ import annotations

import signal
import sys
import threading
from collections import Counter
from pathlib import Path

import httpx
import psutil

from testing.procs import free_port, free_port_run, spawn, start_fake_engine, wait_for_line, wait_until


def child(stack_pid: int, *needles: str) -> psutil.Process:
    for c in psutil.Process(stack_pid).children(recursive=True):
        cmd = " ".join(c.cmdline())
        if all(n in cmd for n in needles):
            return c
    raise LookupError(needles)


def steady_load(url: str, stop: threading.Event, seen: Counter[str], phase: list[str]) -> None:
    """One request at a time, at most one per 10 ms: under nginx's per-client limit (200 r/s), which a
    loop over the fast fake engine exceeds on a quick machine (then nginx's 429s would hide the kills')."""
    body = {"model": "ext", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(timeout=10) as c:
        while not stop.is_set():
            try:
                r = c.post(f"{url}/v1/chat/completions", json=body)
                code = "" if r.status_code == 200 else f" {r.json().get('error', {}).get('code', 'unshaped')}"
                seen[f"{phase[0]} {r.status_code}{code}"] += 1
            except (httpx.HTTPError, ValueError) as exc:
                seen[f"{phase[0]} {type(exc).__name__}"] += 1
            stop.wait(0.01)


def test_dead_services_are_restarted_under_load(tmp_path: Path) -> None:
    engine = start_fake_engine(tmp_path, "--model", "ext-model")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        f"models:\n - name: ext-model\n   aliases: [ext]\n"
        f"   endpoints: [{{url: '{engine.url}', auth: none}}]\n"
    )
    port, redis_port = free_port(), free_port()
    flags = ["--port", str(port), "--redis-port", str(redis_port), "--supervisor-port", str(free_port())]
    flags += ["--keys-redis-port", str(free_port())]
    flags += ["--gateways", "2", "--gateway-port", str(free_port_run(2)), "--no-prometheus"]
    argv = [sys.executable, "-m", "llmgw_tools.stack.cli", "--fleet", str(fleet), "--run-dir"]
    log = tmp_path / "stack.log"
    stack = spawn([*argv, str(tmp_path / "run"), *flags], port, log)
    stop, seen, phase = threading.Event(), Counter[str](), ["up"]
    load = threading.Thread(target=steady_load, args=(f"http://127.0.0.1:{port}", stop, seen, phase))
    try:
        wait_for_line(stack, "READY", 90, "llmgw-stack")
        load.start()
        for name, needles in (
            ("gateway-1", ("llmgw-gateway",)),
            ("nginx", ("nginx: master",)),
            ("redis", ("redis-server", str(redis_port))),
        ):
            phase[0] = name
            child(stack.popen.pid, *needles).send_signal(signal.SIGKILL)
            wait_until(lambda n=name: f"service={n} restarted" in log.read_text(), 60, f"{name} restarted")
            wait_until(lambda n=name: seen[f"{n} 200"] > 20, 30, f"traffic after {name}")
        stop.set()
        load.join(30)
        print(f"answers during the kills: {dict(seen)}")
        failed = {k: v for k, v in seen.items() if not k.endswith(" 200")}
        assert not [k for k in failed if "unshaped" in k], failed
        assert sum(v for k, v in failed.items() if k.startswith("gateway-1")) <= 1, failed
        assert not [k for k in failed if k.startswith(("up", "redis"))], failed
        text = log.read_text()
        assert "service=gateway-1 died (exit -9)" in text and "service=redis died (exit -9)" in text
        # nginx's workers outlive their master: they are let finish their requests, not killed
        assert "service=nginx: 2 processes of its group still serve; sent SIGQUIT" in text
        stack.popen.send_signal(signal.SIGTERM)
        assert stack.popen.wait(60) == 0
    finally:
        stop.set()
        stack.stop()  # SIGTERM first: the stack stops its services (each in its own session) itself
        engine.stop()
