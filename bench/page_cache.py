"""Dropping files from the page cache (``posix_fadvise(DONTNEED)``, file by file: clean pages only, nothing
else on the host is touched), so that a benchmark starts from the state of a host whose page cache does not
hold them, as after a boot: ``--cold`` of bench/autoscale_cycles.py."""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path


def engine_paths() -> list[Path]:
    """This interpreter's library folders (the standard library and site-packages): what a replica
    started with ``sys.executable -m vllm...`` imports from."""
    paths = sysconfig.get_paths()
    found = {Path(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    found.add(Path(sys.base_prefix) / "lib")
    found = {p for p in found if p.is_dir()}
    return sorted(p for p in found if not any(o != p and p.is_relative_to(o) for o in found))


def drop(paths: Iterable[Path]) -> tuple[int, int]:
    """Drop every regular file under ``paths`` from the page cache; (files, bytes) they hold in all."""
    files = size = 0
    for root in paths:
        walk = [(str(root.parent), [], [root.name])] if root.is_file() else os.walk(root)
        for folder, _, names in walk:
            for name in names:
                try:
                    fd = os.open(os.path.join(folder, name), os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    files, size = files + 1, size + os.fstat(fd).st_size
                finally:
                    os.close(fd)
    return files, size
