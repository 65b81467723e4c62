"""Shared fixtures: a real Redis server for the whole session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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
