"""Conventions platform tools expect (issue 45): ``llmgw_build_info{version,commit}`` on the gateway's and
the workers' registries, no ``_created`` series, and ``--version`` on every command-line entry point."""

from __future__ import annotations

import re
import subprocess
import tomllib
from collections.abc import Callable
from importlib import import_module
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from gateway.metrics import GatewayMetrics
from llmgw_contract.build_info import DISTRIBUTION, UNKNOWN, build_info, commit
from llmgw_contract.replica_metrics import SupervisorMetrics

REPO = Path(__file__).resolve().parents[2]
SCRIPTS: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def test_build_info_names_the_version_and_the_checked_out_commit() -> None:
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    info = build_info()
    assert info.version == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert info.commit == head.stdout.strip()


def test_the_distribution_name_is_pyprojects() -> None:
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["name"] == DISTRIBUTION


def test_commit_outside_a_checkout_is_unknown(tmp_path: Path) -> None:
    assert commit(tmp_path) == UNKNOWN


def counted_gateway() -> GatewayMetrics:
    m = GatewayMetrics()
    m.requests.labels("m", "200").inc()
    return m


def counted_supervisor() -> SupervisorMetrics:
    m = SupervisorMetrics()
    m.restarts.labels("m", "r").inc()
    return m


@pytest.mark.parametrize("build", [counted_gateway, counted_supervisor], ids=["gateway", "workers"])
def test_registry_exports_build_info_and_no_created_series(
    build: Callable[[], GatewayMetrics | SupervisorMetrics],
) -> None:
    text = generate_latest(build().registry).decode()
    info = build_info()
    assert f'llmgw_build_info{{commit="{info.commit}",version="{info.version}"}} 1.0' in text
    assert re.search(r"_total\{[^}]*\} 1\.0", text)  # the counter incremented is exported
    assert "_created" not in text


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_cli_prints_its_version(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    module, _, func = SCRIPTS[name].partition(":")
    main = getattr(import_module(module), func)
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    info = build_info()
    assert capsys.readouterr().out.strip().endswith(f"{info.version} (commit {info.commit})")
