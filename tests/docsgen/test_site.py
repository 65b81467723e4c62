"""`make docs`: the site builds with mkdocs --strict (Material theme), and a broken link fails the build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MKDOCS = str(Path(sys.executable).parent / "mkdocs")


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    argv = [MKDOCS, "build", "--strict", "--config-file", str(config), "--site-dir", str(site)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    result = build(REPO / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stderr[-4000:]
    architecture = (tmp_path / "site" / "architecture" / "index.html").read_text()
    assert 'class="mermaid"' in architecture
    assert (tmp_path / "site" / "reference" / "fleet" / "index.html").is_file()


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "getting-started.md"
    page.write_text(page.read_text() + "\nSee [a page that is not there](no-such-page.md).\n")
    result = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr
