"""Checksums of prepared model folders: the ``.prepared.json`` manifest, writing and verifying it.

Every file of a folder is recorded with its size, mtime and sha256.  A quick check (the default) re-hashes
every file up to :data:`QUICK_HASH_LIMIT` bytes and, for bigger ones (the weights), compares size and
mtime and re-hashes only when those changed.  A full check re-hashes everything.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MANIFEST = ".prepared.json"
FORMAT = 1
QUICK_HASH_LIMIT = 16 * 1024 * 1024
_BLOCK = 4 * 1024 * 1024


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class FileRecord:
    """A file by name (relative to its folder, or to its distribution), size, mtime and sha256."""

    name: str
    size: int
    mtime_ns: int
    sha256: str

    @classmethod
    def of(cls, path: Path, name: str, sha256: str | None = None) -> FileRecord:
        st = path.stat()
        return cls(name, st.st_size, st.st_mtime_ns, sha256 or sha256_file(path))

    def problem(self, path: Path, *, full: bool) -> str | None:
        """Why ``path`` no longer matches this record, or None when it does."""
        try:
            st = path.stat()
        except FileNotFoundError:
            return f"{self.name}: missing"
        if st.st_size != self.size:
            return f"{self.name}: size {st.st_size} != recorded {self.size}"
        big_and_untouched = st.st_size > QUICK_HASH_LIMIT and st.st_mtime_ns == self.mtime_ns
        if big_and_untouched and not full:
            return None
        if sha256_file(path) != self.sha256:
            return f"{self.name}: sha256 mismatch"
        return None


@dataclass(frozen=True)
class SourceRecord:
    """A source file of the model: the distribution that ships it, and its record."""

    dist: str
    version: str
    file: FileRecord


@dataclass(frozen=True)
class Manifest:
    package: str
    kind: str
    task: str
    sources: tuple[SourceRecord, ...]
    files: tuple[FileRecord, ...]
    gguf_sha256: str | None
    tools: dict[str, str]
    recipe: int
    format: int = FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        raw: dict[str, Any] = json.loads(text)
        return cls(
            package=str(raw["package"]),
            kind=str(raw["kind"]),
            task=str(raw["task"]),
            sources=tuple(
                SourceRecord(s["dist"], s["version"], FileRecord(**s["file"])) for s in raw["sources"]
            ),
            files=tuple(FileRecord(**f) for f in raw["files"]),
            gguf_sha256=raw.get("gguf_sha256"),
            tools={str(k): str(v) for k, v in raw.get("tools", {}).items()},
            recipe=int(raw["recipe"]),
            format=int(raw["format"]),
        )


def folder_files(folder: Path) -> list[str]:
    """Relative names of the regular files under ``folder`` (the manifest excepted), sorted."""
    names = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink()]
    return sorted(n for n in names if n != MANIFEST)


def record_folder(folder: Path, known: dict[str, str] | None = None) -> tuple[FileRecord, ...]:
    """Records of every file in ``folder``; ``known`` maps names to sha256 sums already computed."""
    known = known or {}
    return tuple(FileRecord.of(folder / name, name, known.get(name)) for name in folder_files(folder))


def write_manifest(folder: Path, manifest: Manifest) -> None:
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(manifest.to_json())
    os.replace(tmp, folder / MANIFEST)


def read_manifest(folder: Path) -> Manifest:
    """The folder's manifest; raises ValueError when it is missing, unreadable or of another format."""
    path = folder / MANIFEST
    try:
        manifest = Manifest.from_json(path.read_text())
    except FileNotFoundError as exc:
        raise ValueError(f"no {MANIFEST}") from exc
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"unreadable {MANIFEST} ({type(exc).__name__}: {exc})") from exc
    if manifest.format != FORMAT:
        raise ValueError(f"{MANIFEST} format {manifest.format}, expected {FORMAT}")
    return manifest


def verify_folder(folder: Path, manifest: Manifest, *, full: bool) -> list[str]:
    """Problems of ``folder`` against its manifest: missing, extra, resized or changed files."""
    recorded = {f.name for f in manifest.files}
    present = set(folder_files(folder))
    problems = [f"{name}: not in {MANIFEST}" for name in sorted(present - recorded)]
    for record in manifest.files:
        problem = record.problem(folder / record.name, full=full)
        if problem:
            problems.append(problem)
    return problems
