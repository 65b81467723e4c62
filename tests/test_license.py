"""The project's license: a LICENSE file with the Apache License 2.0 (vLLM's own), and pyproject.toml
declaring the same license by its SPDX name and shipping the file in the distribution."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_license_file_is_the_apache_license_2_0() -> None:
    text = (REPO / "LICENSE").read_text()
    head = " ".join(text.split()[:5])
    assert head == "Apache License Version 2.0, January"
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_pyproject_declares_the_license_of_the_file() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]


def test_build_backend_understands_spdx_license_expressions() -> None:
    """``license = "Apache-2.0"`` (PEP 639) needs setuptools 77 or newer."""
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    assert requires == ["setuptools>=77"]
