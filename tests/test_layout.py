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
    probe.write_text("import os\nfrom workers.replica.launch import build_launch\nfrom . import sibling\n")
    assert imported_packages(probe) == {"os", "workers"}


def test_gateway_image_carries_the_gateway_and_the_contract_only() -> None:
    dockerfile = (REPO / "deploy" / "docker" / "Dockerfile.gateway").read_text()
    copied = {line.split()[1] for line in dockerfile.splitlines() if line.startswith("COPY ")}
    assert copied == {"pyproject.toml", "gateway", "contract"}


# --- the workers' rooms and the contract (issue 26) ------------------------------------------------------

WORKERS_ROOMS = ("replica", "life", "converge", "ondemand", "host", "planner")
"""The rooms of the control plane; a file at workers/ top level is the CLI or the wiring."""
WORKERS_TOP = {"__init__.py", "cli.py", "wiring.py"}
ROOM_MAY_IMPORT = {
    "host": set(),
    "replica": {"host"},
    "planner": {"replica", "host"},
    "life": {"replica", "host", "planner"},
    "converge": {"replica", "life", "host", "planner"},
    "ondemand": {"replica", "life", "host", "converge"},
}
"""Which rooms each room may import (besides itself and ``contract``): the arrows only run down."""
OFFLINE_TOOLS = ("models", "deploy", "stack")
MAX_LINES = 350


def workers_imports(path: Path) -> set[str]:
    """The workers rooms a file imports (``workers.<room>...``)."""
    rooms: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        rooms |= {n.split(".")[1] for n in names if n.startswith("workers.") and n.count(".") >= 1}
    return rooms


def test_workers_shows_its_rooms_and_nothing_loose() -> None:
    top = {p.name for p in (REPO / "workers").iterdir() if not p.name.startswith((".", "__pycache__"))}
    assert top == WORKERS_TOP | set(WORKERS_ROOMS)


def test_workers_rooms_import_only_downwards() -> None:
    found = []
    for room, allowed in ROOM_MAY_IMPORT.items():
        for path in sorted((REPO / "workers" / room).rglob("*.py")):
            bad = workers_imports(path) - allowed - {room}
            found += [f"{path.relative_to(REPO)}: workers.{b}" for b in sorted(bad)]
    assert found == []


def test_the_control_plane_never_imports_the_offline_tools() -> None:
    found = [
        str(path.relative_to(REPO))
        for pkg in ("workers", "contract", "gateway")
        for path in sorted((REPO / pkg).rglob("*.py"))
        if "tools" in imported_packages(path)
    ]
    assert found == []
    assert all((REPO / "tools" / name / "cli.py").is_file() for name in OFFLINE_TOOLS)


@pytest.mark.parametrize("package", ["workers", "contract"])
def test_no_module_over_the_size_limit(package: str) -> None:
    sizes = {
        str(p.relative_to(REPO)): len(p.read_text().splitlines()) for p in (REPO / package).rglob("*.py")
    }
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}


def test_state_changes_have_one_place() -> None:
    """Only the owner assigns a replica's state or instance id."""
    found = []
    for path in sorted((REPO / "workers").rglob("*.py")):
        text = path.read_text()
        for needle in (".state = ", "new_instance_id()"):
            if needle in text and path.relative_to(REPO).as_posix() not in (
                "workers/life/owner.py",
                "workers/life/replica.py",
            ):
                found.append(f"{path.relative_to(REPO)}: {needle}")
    assert found == []
