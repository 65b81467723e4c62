"""A ``unix://`` Redis URL (llmgw_contract/redis_url.py documents it) reaches the lean admission connection
as a socket path: the lean client talks to the server on that socket, as redis-py does, against a real
redis-server listening on a unix socket (and on a TCP port of its own, never 6379)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.admission.redis_wire import Endpoint, PipelinedRedis
from gateway.redis_clients import fast_client
from llmgw_contract.redis_url import connect_sync
from testing.procs import Proc, start_redis


@pytest.fixture(scope="module")
def unix_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proc, Path]]:
    tmp = tmp_path_factory.mktemp("unix-redis")
    sock = tmp / "redis.sock"
    proc = start_redis(tmp, extra=["--unixsocket", str(sock), "--unixsocketperm", "700"])
    yield proc, sock
    proc.stop()


def test_endpoint_of_a_unix_url_is_the_socket_path(tmp_path: Path) -> None:
    client = fast_client(f"unix://{tmp_path / 'r.sock'}?db=3", 2.0)
    endpoint = Endpoint.of(client)
    assert (endpoint.path, endpoint.db) == (str(tmp_path / "r.sock"), 3)


async def test_lean_client_speaks_over_the_socket(unix_redis: tuple[Proc, Path]) -> None:
    _, sock = unix_redis
    client = fast_client(f"unix://{sock}?db=2", 2.0)
    lean = PipelinedRedis.like(client, 2.0)
    try:
        await client.set("unix-wire", "from-redis-py")
        assert await lean.call("GET", "unix-wire") == b"from-redis-py"
        assert await lean.call("SET", "unix-wire", "from-lean") == "OK"
        assert await client.get("unix-wire") == b"from-lean"
        info = await lean.call("CLIENT", "INFO")
        assert isinstance(info, bytes) and f"addr={sock}".encode() in info and b" db=2 " in info
    finally:
        lean.close()
        await client.aclose()


def test_sync_client_of_a_unix_url_answers(unix_redis: tuple[Proc, Path]) -> None:
    """The synchronous client (threads that work while the loop is busy) takes the same options."""
    _, sock = unix_redis
    client = connect_sync(f"unix://{sock}", socket_timeout=2.0, socket_keepalive=True)
    try:
        assert client.ping()
    finally:
        client.close()
