"""The resident memory of a process tree, read from /proc (the ledger's measurement of a woken replica)."""

from __future__ import annotations

import os
import subprocess
import sys

from workers.host.rss import tree_rss_bytes


def test_a_tree_counts_its_children_and_a_gone_process_counts_nothing() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        alone = tree_rss_bytes(child.pid)
        assert alone > 1 << 20  # a Python interpreter holds megabytes
        assert tree_rss_bytes(os.getpid()) >= alone  # this test's process and its child
    finally:
        child.communicate(b"")
    assert tree_rss_bytes(child.pid) == 0
