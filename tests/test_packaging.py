"""The wheel: a distribution name of its own (``llm-gateway`` is taken on PyPI) and, beside the user-facing
``gateway`` and ``workers``, only ``llmgw_``-prefixed top-level packages, so that installing it puts no
``tools`` or ``contract`` into the environment it lands in."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHIPPED = ("gateway", "workers", "llmgw_contract", "llmgw_tools")


def build_wheel(tmp: Path) -> Path:
    """The wheel ``pip wheel`` builds from a copy of the tree (setuptools writes ``build/`` beside its
    source)."""
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SHIPPED:
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "LICENSE", "README.md"):
        shutil.copy(REPO / name, src / name)
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    cmd = [*pip, "-w", str(tmp), str(src)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return next(tmp.glob("*.whl"))


def test_the_wheel_installs_only_its_own_top_level_packages(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert tops - {n for n in tops if n.endswith(".dist-info")} == set(SHIPPED)
    assert wheel.name.startswith("llm_fleet_gateway-")


def test_the_distribution_name_is_not_the_taken_one() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["name"] == "llm-fleet-gateway"
    assert not {"contract", "tools"} & {p.name for p in REPO.iterdir() if (p / "__init__.py").is_file()}
