"""The package layout holds: ``gateway`` and ``workers`` never import each other, ``llmgw_contract`` imports
neither, and the gateway image carries the gateway and the contract only."""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "gateway": {"workers"},
    "workers": {"gateway"},
    "llmgw_contract": {"gateway", "workers"},
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
    copies = [line.split()[1:-1] for line in dockerfile.splitlines() if line.startswith("COPY ")]
    copied = {src for sources in copies for src in sources}
    installs = {"requirements/image-build.txt", "requirements/image-gateway.txt", "pyproject.toml", "LICENSE"}
    assert copied == {*installs, "gateway", "llmgw_contract"}


# --- the workers' rooms and the contract (issue 26) ------------------------------------------------------

WORKERS_ROOMS = ("replica", "life", "converge", "ondemand", "host", "planner", "scale", "autoscale")
"""The rooms of the control plane; a file at workers/ top level is the CLI or the wiring."""
WORKERS_TOP = {"__init__.py", "cli.py", "wiring.py"}
ROOM_MAY_IMPORT = {
    "host": set(),
    "replica": {"host"},
    "planner": {"replica", "host"},
    "life": {"replica", "host", "planner"},
    "converge": {"replica", "life", "host", "planner"},
    "ondemand": {"replica", "life", "host", "converge"},
    "scale": set(),  # KEDA's external scaler: the contract's demand and rules only
    "autoscale": {"replica", "life", "host", "planner", "converge"},  # the supervisor as the scaler
}
"""Which rooms each room may import (besides itself and ``llmgw_contract``): the arrows only run down."""
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
        for pkg in ("workers", "llmgw_contract", "gateway")
        for path in sorted((REPO / pkg).rglob("*.py"))
        if "llmgw_tools" in imported_packages(path)
    ]
    assert found == []
    assert all((REPO / "llmgw_tools" / name / "cli.py").is_file() for name in OFFLINE_TOOLS)


@pytest.mark.parametrize("package", ["workers", "llmgw_contract"])
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


# The gateway's floors, lowest first: a module may import gateway modules of its own floor or below.
# The first pattern a module's path matches places it.
GATEWAY_FLOORS: list[tuple[str, tuple[str, ...]]] = [
    (
        "base",
        (
            "gateway/settings.py", "gateway/errors.py", "gateway/metrics.py", "gateway/endpoints.py",
            "gateway/periodic.py", "gateway/shutdown.py", "gateway/redis_clients.py", "gateway/__init__.py",
            "gateway/batched_histogram.py",
        ),
    ),
    ("values", ("gateway/values.py", "gateway/replicas/table.py", "gateway/replicas/progress.py")),
    (
        "rooms",
        (
            "gateway/auth/*", "gateway/admission/*", "gateway/routing/*", "gateway/upstream/*",
            "gateway/on_demand/*", "gateway/responses_api/*", "gateway/lora/*", "gateway/migration/*",
            "gateway/idempotency/*",
            "gateway/replicas/discovery.py", "gateway/replicas/monitor.py", "gateway/replicas/ejection.py",
            "gateway/replicas/inflight.py", "gateway/replicas/__init__.py", "gateway/pipeline/tokens.py",
            "gateway/replicas/model_cards.py", "gateway/tracing.py",
        ),
    ),
    ("state", ("gateway/state.py",)),
    ("pipeline", ("gateway/pipeline/*",)),
    ("edge", ("gateway/edge/*", "gateway/admin/*")),
    ("app", ("gateway/app.py", "gateway/fleet_reload.py")),
    ("entry", ("gateway/cli.py", "gateway/fleet_cli.py")),
]  # fmt: skip
# On the rooms floor a room imports another room only where this says so.
ROOM_IMPORTS = {
    "routing": {"admission"},  # the shared prefix index runs its script over the admission's wire client
    "auth": {"admission"},  # so do the per-key rate limits
    "migration": {"upstream"},  # a moving stream reads its replica's answer and opens continuations
    "responses_api": {"idempotency"},  # background responses keep their events as keyed streams do
}
MAX_MODULE_LINES = 350


def floor_of(relpath: str) -> int:
    for level, (_, patterns) in enumerate(GATEWAY_FLOORS):
        if any(fnmatch.fnmatch(relpath, p) for p in patterns):
            return level
    raise AssertionError(f"{relpath} is on no floor of GATEWAY_FLOORS")


def gateway_imports(path: Path) -> set[str]:
    """The gateway modules a file imports, as paths relative to the repository."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            if name == "gateway" or not name.startswith("gateway."):
                continue
            base = REPO / name.replace(".", "/")
            module = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
            found.add(str(module.relative_to(REPO)))
    return found


def room_of(relpath: str) -> str:
    parts = relpath.split("/")
    return parts[1] if len(parts) > 2 else parts[1].removesuffix(".py")


def layering_breaks() -> list[str]:
    breaks = []
    for path in sorted((REPO / "gateway").rglob("*.py")):
        src = str(path.relative_to(REPO))
        for target in sorted(gateway_imports(path)):
            if floor_of(target) > floor_of(src):
                breaks.append(f"{src} -> {target}: a lower floor imports a higher one")
            elif (
                floor_of(target) == floor_of(src) == 2
                and room_of(src) != room_of(target)
                and room_of(target) not in ROOM_IMPORTS.get(room_of(src), set())
            ):
                breaks.append(f"{src} -> {target}: a room imports another room")
    return breaks


def test_gateway_floors_hold() -> None:
    assert layering_breaks() == []


def test_every_gateway_module_is_on_a_floor_and_short() -> None:
    long = []
    for path in sorted((REPO / "gateway").rglob("*.py")):
        floor_of(str(path.relative_to(REPO)))
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            long.append(f"{path.relative_to(REPO)}: {lines} lines")
    assert long == []


def test_the_floor_check_sees_an_upward_import() -> None:
    assert floor_of("gateway/values.py") < floor_of("gateway/pipeline/proxy.py")
    assert room_of("gateway/auth/keys.py") == "auth" and room_of("gateway/values.py") == "values"


def test_bench_and_testing_never_import_tests() -> None:
    found = []
    for package in ("bench", "testing"):
        for path in sorted((REPO / package).rglob("*.py")):
            bad = imported_packages(path) & ({"tests"} if package == "bench" else {"tests", "bench"})
            found += [f"{path.relative_to(REPO)}: {b}" for b in sorted(bad)]
    assert found == []
