"""The scaler's rules follow the fleet file: a change is read on the next call; a file that stops
validating keeps the last good rules; the first read refuses an unusable file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmgw_contract.fleet import FleetError
from workers.scale.rules import FleetRules

ONE = "models:\n - name: a\n   source: {package: x}\n   replicas: 2\n"


def write(path: Path, text: str, bump_ns: int) -> None:
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump_ns))  # a distinct stamp, whatever the clock


def test_rules_follow_the_file_and_keep_the_last_good(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    write(path, ONE, 0)
    rules = FleetRules(path)
    assert rules()["a"].max_replicas == 2
    write(path, ONE + "   scaling: {min_replicas: 1, max_replicas: 5}\n", 1_000_000)
    assert rules()["a"].max_replicas == 5
    write(path, ONE + "   scaling: {min_replicas: 9, max_replicas: 5}\n", 2_000_000)
    assert rules()["a"].max_replicas == 5


def test_the_first_read_refuses_an_unusable_file(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text("models: []\n")
    with pytest.raises(FleetError):
        FleetRules(path)
