"""The package layout holds: ``gateway`` and ``workers`` never import each other, ``contract`` imports
neither, and the gateway image carries the gateway and the contract only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "gateway": {"workers"},
    "workers": {"gateway"},
    "contract": {"gateway", "workers"},
}


def imported_packages(path: Path) -> set[str]:
    """The top-level package of every module a file imports (relative imports stay inside)."""
    tops: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            tops |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            tops.add(node.module.split(".")[0])
    return tops


def crossings(package: str) -> list[str]:
    """``file: package`` for each import of a package this one must not import."""
    found = []
    for path in sorted((REPO / package).rglob("*.py")):
        bad = imported_packages(path) & FORBIDDEN[package]
        found += [f"{path.relative_to(REPO)}: {b}" for b in sorted(bad)]
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_what_the_layout_allows(package: str) -> None:
    assert crossings(package) == []


def test_the_check_sees_an_import_it_forbids(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nfrom workers.launch import build_launch\nfrom . import sibling\n")
    assert imported_packages(probe) == {"os", "workers"}


def test_gateway_image_carries_the_gateway_and_the_contract_only() -> None:
    dockerfile = (REPO / "deploy" / "docker" / "Dockerfile.gateway").read_text()
    copied = {line.split()[1] for line in dockerfile.splitlines() if line.startswith("COPY ")}
    assert copied == {"pyproject.toml", "gateway", "contract"}
