"""`make lint` as part of `make test`: ruff (rules and format) and mypy --strict over the code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PATHS = ["llmgw_contract", "gateway", "workers", "llmgw_tools", "tests", "bench", "testing", "docsgen"]


@pytest.mark.parametrize(
    "argv",
    [
        [str(BIN / "ruff"), "check", *PATHS],
        [str(BIN / "ruff"), "format", "--check", *PATHS],
        [str(BIN / "mypy")],
    ],
    ids=["ruff-check", "ruff-format", "mypy-strict"],
)
def test_lint(argv: list[str]) -> None:
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
