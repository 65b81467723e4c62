"""The embedded stack never borrows or stops a host's service (issue 45): where another process holds one
of its fixed ports (a workstation's own Prometheus on 9090, say), ``llmgw-stack`` refuses to start and
names the port, the service and the option, instead of taking the host's service for its own."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw_tools.stack.cli import main
from llmgw_tools.stack.stack import Stack, StackConfig
from testing.procs import free_port


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port another process (here: this one) listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def free_config(**changes: object) -> StackConfig:
    ports = {
        "redis_port": free_port(), "keys_redis_port": free_port(), "nginx_port": free_port(),
        "gateway_ports": (free_port(), free_port()), "prometheus_port": free_port(),
        "supervisor_metrics_port": free_port(),
    }  # fmt: skip
    return StackConfig(**{**ports, **changes})  # type: ignore[arg-type]


def test_free_ports_pass(held_port: int) -> None:
    assert free_config().ports_in_use() == []


def test_a_held_port_is_named_with_its_option(held_port: int) -> None:
    (line,) = free_config(prometheus_port=held_port).ports_in_use()
    assert line.startswith(f"port {held_port} (Prometheus) is in use") and line.endswith("--prometheus-port")
    assert free_config(prometheus_port=0, nginx_port=held_port).ports_in_use()[0].endswith("--port")


def test_the_cli_refuses_before_starting_anything(
    held_port: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "--fleet",
        str(tmp_path / "fleet.yaml"),
        "--run-dir",
        str(tmp_path / "run"),
        "--port",
        str(held_port),
    ]
    argv += [
        "--redis-port",
        str(free_port()),
        "--keys-redis-port",
        str(free_port()),
        "--gateway-port",
        str(free_port()),
    ]
    argv += ["--prometheus-port", str(free_port()), "--supervisor-port", str(free_port())]
    assert main(argv) == 2
    assert f"port {held_port} (nginx) is in use" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_nginx_writes_no_file_of_the_hosts(tmp_path: Path) -> None:
    """nginx's configuration, pid, temp folders and error log (the start-up one included: ``-e``) are the
    stack's, under its run folder."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("models:\n - name: m\n   endpoints: [{url: 'http://127.0.0.1:1', auth: none}]\n")
    service = Stack(free_config(fleet_file=fleet, run_dir=tmp_path / "run")).nginx()
    run = tmp_path / "run" / "nginx"
    options = dict(zip(service.argv[1::2], service.argv[2::2], strict=False))
    assert options["-c"] == str(run / "nginx.conf") and options["-p"] == str(run)
    assert options["-e"] == str(run / "nginx-error.log")
    conf = (run / "nginx.conf").read_text()
    assert f"pid {run}/nginx.pid;" in conf and "/var/" not in conf
