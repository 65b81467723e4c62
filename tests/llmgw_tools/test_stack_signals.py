"""`llmgw-stack` and signals, for real (Redis, the supervisor, a gateway, nginx) with a fleet whose one
model is the FAKE ENGINE run elsewhere: SIGHUP re-reads the fleet file and stops nothing (every service
keeps its pid, an open stream finishes); a kill -9 of the stack takes its services with it, and a new
stack comes up on the same ports."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import httpx
import psutil

from testing.procs import Proc, free_port, port_open, spawn, start_fake_engine, wait_for_line, wait_until


def stack_argv(tmp: Path, fleet: Path, ports: dict[str, int]) -> list[str]:
    flags = [x for k, v in ports.items() for x in (f"--{k}", str(v))]
    return [sys.executable, "-m", "llmgw_tools.stack.cli", "--fleet", str(fleet), "--run-dir",
            str(tmp / "run"), "--gateways", "1", "--no-prometheus", *flags]  # fmt: skip


def setup(tmp: Path, *engine_args: str) -> tuple[Proc, Path, dict[str, int]]:
    engine = start_fake_engine(tmp, "--model", "ext-model", *engine_args)
    fleet = tmp / "fleet.yaml"
    fleet.write_text(
        "models:\n - name: ext-model\n   aliases: [ext]\n"
        f"   endpoints: [{{url: '{engine.url}', auth: none}}]\n"
    )
    ports = {
        k: free_port() for k in ("port", "gateway-port", "redis-port", "keys-redis-port", "supervisor-port")
    }
    return engine, fleet, ports


def services(stack: Proc) -> dict[int, str]:
    return {c.pid: c.name() for c in psutil.Process(stack.popen.pid).children(recursive=False)}


def alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out


def test_sighup_reloads_and_every_service_keeps_running_with_an_open_stream(tmp_path: Path) -> None:
    engine, fleet, ports = setup(tmp_path, "--tokens", "30", "--delay-ms", "100")  # a 3 s stream
    stack = spawn(stack_argv(tmp_path, fleet, ports), ports["port"], tmp_path / "stack.log")
    try:
        wait_for_line(stack, "READY", 90, "llmgw-stack")
        before = services(stack)
        body = {"model": "ext", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        url = f"http://127.0.0.1:{ports['port']}/v1/chat/completions"
        streamed: list[str] = []

        def read_stream() -> None:
            with httpx.stream("POST", url, json=body, timeout=30) as r:
                streamed.extend(r.iter_lines())

        reader = threading.Thread(target=read_stream)
        reader.start()
        wait_until(lambda: len(streamed) > 2, 10, "the stream has begun")
        stack.popen.send_signal(signal.SIGHUP)
        wait_for_line(stack, "SIGHUP: the supervisor re-reads", 10, "llmgw-stack")
        workers_log = tmp_path / "run" / "logs" / "workers.log"
        wait_until(lambda: "re-read requested (SIGHUP)" in workers_log.read_text(), 10, "supervisor reload")
        reader.join(30)
        assert [line for line in streamed if line][-1] == "data: [DONE]"  # the open stream finished
        assert stack.popen.poll() is None and services(stack) == before  # every service kept its pid
    finally:
        stack.stop()
        engine.stop()


def test_kill_9_of_the_stack_takes_its_services_and_a_new_stack_comes_up(tmp_path: Path) -> None:
    engine, fleet, ports = setup(tmp_path)
    stack = spawn(stack_argv(tmp_path, fleet, ports), ports["port"], tmp_path / "stack.log")
    again: Proc | None = None
    try:
        wait_for_line(stack, "READY", 90, "llmgw-stack")
        children = [c.pid for c in psutil.Process(stack.popen.pid).children(recursive=True)]
        assert len(children) >= 4  # redis x2, supervisor, gateway, nginx
        os.kill(stack.popen.pid, signal.SIGKILL)
        stack.popen.wait(10)
        wait_until(lambda: not alive(children), 30, "every service of the killed stack gone")
        assert not any(port_open(p) for p in ports.values())
        again = spawn(stack_argv(tmp_path, fleet, ports), ports["port"], tmp_path / "stack-again.log")
        wait_for_line(again, "READY", 90, "the new llmgw-stack")
    finally:
        for p in (stack, again):
            if p is not None:
                p.stop()
        engine.stop()
