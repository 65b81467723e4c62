"""Fixtures that lead the lean client's and the scripts' tests, imported into a module of their own, to
another server binary than the OS's redis-server: the module defines ``binary`` (the server's path, the
test skipped where it is not installed) and imports these after the tests (``# isort: split``), so that they
replace the tests' own ``redis_url`` and ``server``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.procs import Proc, start_redis


@pytest.fixture(scope="module")
def other_server(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """One server of ``binary`` for the module, on a free port."""
    proc = start_redis(tmp_path_factory.mktemp(Path(binary).parent.name), binary=binary)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def redis_url(other_server: Proc) -> str:
    return f"redis://127.0.0.1:{other_server.port}/0"


@pytest.fixture
def server(binary: str, tmp_path: Path) -> Iterator[Proc]:
    """test_ratelimit_wire's server of its own (it reads CLIENT LIST), of ``binary``."""
    proc = start_redis(tmp_path / "limits", binary=binary)
    yield proc
    proc.stop()


def binary_or_skip(binary: str | None, what: str) -> str:
    if binary is None:
        pytest.skip(f"{what} is not installed (`make install` installs it)")
    return binary
