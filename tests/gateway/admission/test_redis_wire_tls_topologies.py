"""TLS on Sentinel and Cluster (``rediss+sentinel://``, ``rediss+cluster://``, llmgw_contract/redis_url.py):
the redis-py clients and the lean pipelined one speak TLS to every server, verifying its certificate against
the CA file the URL names (``ssl_ca_certs``), against real TLS-only redis-servers: a one-node cluster
that holds every slot, and a master with one Sentinel (the cluster bus and the Sentinel's own links to
the master over TLS too)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.admission.redis_cluster_wire import lean_client
from llmgw_contract.redis_url import connect, connect_sync
from llmgw_tools.stack.ports import HOST
from llmgw_tools.stack.redis_topology import cluster_port
from testing.poll import wait_until
from testing.procs import free_port, port_open, spawn, start_redis, tls_args

SERVICE = "llmgw"


def tls_cli(certs: Path, port: int, *args: str) -> str:
    """``redis-cli --tls`` (the test CA) on ``port``: its output."""
    argv = ["redis-cli", "--tls", "--cacert", str(certs / "cert.pem"), "-h", HOST, "-p", str(port), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[int]:
    """The port of one TLS-only cluster node (its cluster bus over TLS too) holding all 16384 slots."""
    port = cluster_port()
    extra = [*tls_args(certs, port), "--tls-cluster", "yes", "--cluster-enabled", "yes"]
    proc = start_redis(tmp_path_factory.mktemp("tls-cluster"), port=port, extra=extra)
    try:
        assert tls_cli(certs, port, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").strip() == "OK"
        wait_until(lambda: "cluster_state:ok" in tls_cli(certs, port, "CLUSTER", "INFO"), 10, "TLS cluster")
        yield port
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def tls_sentinel(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[int]:
    """The port of a TLS-only Sentinel watching a TLS-only master (quorum 1)."""
    tmp = tmp_path_factory.mktemp("tls-sentinel")
    master_port, port = free_port(), free_port()
    master = start_redis(tmp / "master", port=master_port, extra=tls_args(certs, master_port))
    conf = tmp / "sentinel.conf"
    conf.write_text(
        f"bind {HOST}\ndir {tmp}\nport 0\ntls-port {port}\ntls-cert-file {certs / 'cert.pem'}\n"
        f"tls-key-file {certs / 'key.pem'}\ntls-ca-cert-file {certs / 'cert.pem'}\ntls-auth-clients no\n"
        f"tls-replication yes\nsentinel monitor {SERVICE} {HOST} {master_port} 1\n"
    )
    sentinel = spawn(["redis-server", str(conf), "--sentinel"], port, tmp / "sentinel.log")
    try:
        wait_until(lambda: port_open(port), 10, "TLS Sentinel")
        wait_until(lambda: "role:master" in tls_cli(certs, master_port, "INFO", "replication"), 10, "master")
        yield port
    finally:
        sentinel.stop()
        master.stop()


async def roundtrip(url: str) -> None:
    """redis-py and the lean connection read what the other wrote, over TLS."""
    client = connect(url, socket_timeout=2.0)
    lean = lean_client(client, 2.0)
    try:
        await client.set("{tls}:k", "from-redis-py")
        assert await lean.call("GET", "{tls}:k") == b"from-redis-py"
        assert await lean.call("SET", "{tls}:k", "from-lean") == "OK"
        assert await client.get("{tls}:k") == b"from-lean"
    finally:
        lean.close()
        await client.aclose()


async def test_cluster_over_tls(tls_cluster: int, certs: Path) -> None:
    await roundtrip(f"rediss+cluster://{HOST}:{tls_cluster}?ssl_ca_certs={certs / 'cert.pem'}")


async def test_sentinel_over_tls(tls_sentinel: int, certs: Path) -> None:
    await roundtrip(f"rediss+sentinel://{HOST}:{tls_sentinel}/{SERVICE}?ssl_ca_certs={certs / 'cert.pem'}")


async def test_an_untrusted_cluster_node_is_refused(tls_cluster: int) -> None:
    """Without the test CA the node's certificate does not verify: the lean client refuses it."""
    client = connect(f"rediss+cluster://{HOST}:{tls_cluster}", socket_timeout=2.0)
    lean = lean_client(client, 2.0)
    try:
        with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
            await lean.call("GET", "{tls}:k")
    finally:
        lean.close()
        await client.aclose()


def test_sync_clients_over_tls(tls_cluster: int, tls_sentinel: int, certs: Path) -> None:
    """The synchronous clients (threads that work while the loop is busy) take the same URLs."""
    ca = certs / "cert.pem"
    for url in (
        f"rediss+cluster://{HOST}:{tls_cluster}?ssl_ca_certs={ca}",
        f"rediss+sentinel://{HOST}:{tls_sentinel}/{SERVICE}?ssl_ca_certs={ca}",
    ):
        client = connect_sync(url, socket_timeout=2.0)
        try:
            assert client.ping()
        finally:
            client.close()
