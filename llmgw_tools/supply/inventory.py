"""The installed distributions of this environment, with their licenses, and the runtime set: the project's
runtime dependencies (pyproject.toml's ``dependencies`` and its runtime extras, tracing, workers and
scaler: llmgw_contract/extras.py) and everything they require, transitively, as the installed metadata says
(markers evaluated for this interpreter, extras followed)."""

from __future__ import annotations

import importlib.metadata
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from llmgw_contract.extras import EXTRAS
from llmgw_tools.supply.licenses import License, read_license

REPO = Path(__file__).resolve().parents[2]
PROJECT = "llm-fleet-gateway"


@dataclass(frozen=True)
class Component:
    """One installed distribution: canonical name, version, license, and whether the runtime set holds it."""

    name: str
    version: str
    license: License
    runtime: bool


def runtime_requirements(pyproject: Path = REPO / "pyproject.toml") -> list[Requirement]:
    """pyproject.toml's ``[project].dependencies`` and those of its runtime extras."""
    project = tomllib.loads(pyproject.read_text())["project"]
    texts = project["dependencies"] + [t for extra in EXTRAS for t in project["optional-dependencies"][extra]]
    return [Requirement(text) for text in texts]


def installed() -> dict[str, importlib.metadata.Distribution]:
    """Canonical name -> installed distribution (the first one on sys.path wins, as for imports)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    for dist in importlib.metadata.distributions():
        found.setdefault(canonicalize_name(dist.metadata["Name"]), dist)
    return found


def closure(roots: list[Requirement], dists: dict[str, importlib.metadata.Distribution]) -> set[str]:
    """The canonical names of the installed distributions ``roots`` need, transitively (a requirement whose
    marker is false here, or that is not installed, is skipped)."""
    needed: set[str] = set()
    done: set[tuple[str, str]] = set()
    todo = [(req, "") for req in roots]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        if name not in dists:
            continue
        needed.add(name)
        for wanted in ["", *sorted(req.extras)]:
            if (name, wanted) in done:
                continue
            done.add((name, wanted))
            todo += [(Requirement(text), wanted) for text in dists[name].requires or []]
    return needed


def inventory(
    dists: dict[str, importlib.metadata.Distribution], pyproject: Path = REPO / "pyproject.toml"
) -> list[Component]:
    """Every distribution of ``dists`` (``installed()``) but the project itself, sorted by name, its runtime
    membership marked."""
    runtime = closure(runtime_requirements(pyproject), dists)
    return [
        Component(name, dist.version, read_license(dist.metadata), name in runtime)  # type: ignore[arg-type]
        for name, dist in sorted(dists.items())
        if name != PROJECT
    ]
