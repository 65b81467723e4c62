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


def tree_rss_bytes(root: int, proc: Path = PROC) -> int:
    """The resident bytes of ``root`` and every process below it; 0 when it is gone."""
    table: dict[int, tuple[int, int]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            got = _ppid_and_rss(int(entry.name), proc)
            if got is not None:
                table[int(entry.name)] = got
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in table:
            continue
        seen.add(pid)
        total += table[pid][1]
        todo.extend(child for child, (parent, _) in table.items() if parent == pid)
    return total
