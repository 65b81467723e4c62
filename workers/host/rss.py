"""Resident memory of a process and its descendants, from /proc (vLLM's CPU build runs its engine in a
child process): what a woken replica really takes, for the on-demand ledger."""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def _ppid_and_rss(pid: int, proc: Path) -> tuple[int, int] | None:
    try:
        fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # after the command: state(0) ppid(1) ... rss in pages is field 24 of stat, index 21 here
    return int(fields[1]), int(fields[21]) * os.sysconf("SC_PAGE_SIZE")


def _table(proc: Path) -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, resident bytes) of every process /proc shows."""
    table: dict[int, tuple[int, int]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            got = _ppid_and_rss(int(entry.name), proc)
            if got is not None:
                table[int(entry.name)] = got
    return table


def _tree(root: int, table: dict[int, tuple[int, int]]) -> set[int]:
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in out or pid not in table:
            continue
        out.add(pid)
        todo.extend(child for child, (parent, _) in table.items() if parent == pid)
    return out


def tree_pids(root: int, proc: Path = PROC) -> set[int]:
    """``root`` and every process below it (vLLM's engine core, which holds the GPU memory, is a child);
    empty when it is gone."""
    return _tree(root, _table(proc))


def tree_rss_bytes(root: int, proc: Path = PROC) -> int:
    """The resident bytes of ``root`` and every process below it; 0 when it is gone."""
    table = _table(proc)
    return sum(table[pid][1] for pid in _tree(root, table))
