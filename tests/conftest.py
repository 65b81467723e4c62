"""Shared fixtures: a real Redis server for the whole session."""

from __future__ import annotations

import atexit
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw_tools.stack.redis_topology import Topology, start
from testing.procs import Proc, start_redis


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_redis(tmp_path_factory.mktemp("redis"))
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: Proc) -> str:
    return f"redis://127.0.0.1:{redis_server.port}/0"


@pytest.fixture
def tmp_run(tmp_path: Path) -> Path:
    return tmp_path


class Topologies:
    """Redis topologies (single, Sentinel, Cluster) started on first use, once per test run."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.started = tmp, {}  # type: dict[str, Topology]
        atexit.register(self.stop)  # also when the session's teardown never runs (an interrupted run)

    def get(self, kind: str, binary: str = "redis-server") -> Topology:
        """``kind``'s topology of ``binary`` nodes (redis-server, or valkey-server: testing/procs.py)."""
        name = kind if binary == "redis-server" else f"{kind}-{Path(binary).name}"
        if name not in self.started:
            self.started[name] = start(kind, self.tmp / name, binary)
        return self.started[name]

    def stop(self) -> None:
        """Kill every node's process group; idempotent (the fixture's teardown, then atexit)."""
        while self.started:
            self.started.popitem()[1].stop()
        atexit.unregister(self.stop)


@pytest.fixture(scope="session")
def topologies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topologies]:
    started = Topologies(tmp_path_factory.mktemp("topologies"))
    yield started
    started.stop()


@pytest.fixture(autouse=True)
def root_logging_kept() -> Iterator[None]:
    """A test that configures logging (a command's main() run in-process: ``configure_logging`` puts a
    handler on the sys.stdout of that moment, pytest's capture file) leaves the root logger as it found it:
    its plain StreamHandlers go and the level comes back. Else every later test logs into a file pytest
    has closed, and the run's output fills with "--- Logging error ---" tracebacks."""
    root = logging.getLogger()
    before, level = set(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in before and type(h) is logging.StreamHandler]:
        root.removeHandler(handler)
    root.setLevel(level)
