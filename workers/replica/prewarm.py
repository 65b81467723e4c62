"""What a replica's start reads from disk, and reading it ahead into the page cache.

A start from nothing reads the engine's code (the interpreter imports vLLM, torch and the rest: about
800 MiB of Python files and native libraries for vLLM on CPU) and the model's files (weights, tokenizer,
config). On a host whose page cache does not hold them (the first start after a boot, or after the files
were evicted), that start is slower than the next ones, and the cold-start estimate the gateways give as
the ETA (:mod:`llmgw_contract.cold_starts`) learns from an unrepresentative sample.

:func:`warm_plan` derives, from a replica's :class:`~workers.replica.launch.Launch` alone (pure):

* the engine's import: where the command runs ``<python> -m <module>``, the command
  ``nice -n 19 <python> -c "import <module>"``, which reads exactly the files that import reads (the
  module's top level runs, ``__main__`` does not);
* the local paths the command line names after the module (the ``--model`` folder, a chat template
  file...), every regular file under them.

:func:`read_files` reads those files through (in a thread: it blocks), unless together they exceed a
share of the host's available memory (a model too large to keep cached is not read at all).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from workers.replica.launch import Launch

CHUNK = 8 << 20
"""Bytes per read."""
MEMORY_SHARE = 0.5
"""At most this share of the host's available memory is read into the page cache for one model."""


@dataclass(frozen=True)
class WarmPlan:
    """What to read ahead for one replica's start."""

    imports: tuple[str, ...] | None
    """The command that imports the engine's module (None: the launch runs no ``python -m``)."""
    paths: tuple[Path, ...]
    """Local files and folders the command line names."""
    env: dict[str, str] = field(default_factory=dict)
    """The launch's environment (added to the supervisor's, as for the start itself)."""


def warm_plan(launch: Launch) -> WarmPlan:
    """The engine's import and the local paths of ``launch`` (see the module doc)."""
    argv = launch.argv
    try:
        at = argv.index("-m")
    except ValueError:
        return WarmPlan(None, ())
    if at == 0 or at + 1 >= len(argv):
        return WarmPlan(None, ())
    python, module = argv[at - 1], argv[at + 1]
    nice = ["nice", "-n", "19"] if shutil.which("nice") else []
    imports = (*nice, python, "-c", f"import {module}")
    paths = tuple(dict.fromkeys(Path(a) for a in argv[at + 2 :] if os.path.isabs(a) and os.path.exists(a)))
    return WarmPlan(imports, paths, dict(launch.env))


def files_under(paths: Iterable[Path]) -> list[Path]:
    """Every regular file of ``paths`` (a file itself, or the files under a folder, sorted)."""
    found: list[Path] = []
    for p in paths:
        if p.is_file():
            found.append(p)
        elif p.is_dir():
            found += sorted(f for f in p.rglob("*") if f.is_file())
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class Read:
    """What :func:`read_files` did: files and bytes read, or why nothing was read."""

    files: int
    bytes: int
    skipped: str = ""


def read_files(paths: Iterable[Path], available_bytes: int | None) -> Read:
    """Read every file under ``paths`` through once (into the page cache); nothing when together they
    exceed :data:`MEMORY_SHARE` of ``available_bytes`` (None: unknown, read). Blocking: call it in a thread.
    A file that cannot be read is skipped."""
    files = files_under(paths)
    total = sum(f.stat().st_size for f in files)
    if available_bytes is not None and total > MEMORY_SHARE * available_bytes:
        why = (
            f"{total >> 20} MiB is more than {MEMORY_SHARE:.0%} of the {available_bytes >> 20} MiB available"
        )
        return Read(0, 0, why)
    buf = bytearray(CHUNK)
    done = count = 0
    for f in files:
        try:
            with f.open("rb", buffering=0) as fh:
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
                while n := fh.readinto(buf):
                    done += n
            count += 1
        except OSError:
            continue
    return Read(count, done)
