"""`make docs`: the site builds with mkdocs --strict (Material theme), and a broken link fails the build."""

from __future__ import annotations

import os
import re
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


TOP_FOLDERS = (
    *("llmgw_contract/", "llmgw_tools/", "gateway/", "workers/", "bench/", "tests/", "testing/"),
    *("deploy/", "grafana/", "docsgen/", "docs/"),
)
WRITTEN_ELSEWHERE: set[str] = set()
"""Paths the docs name before the branch that writes them is merged; drop each once it exists."""


def named_paths(text: str, links: bool) -> set[str]:
    """Repository paths in code spans (```gateway/app.py```), and in relative links (``](docs/x.md)``)
    when ``links`` (the README's; mkdocs checks the links between pages itself)."""
    found = {m.rstrip(".,:") for m in re.findall(r"`([A-Za-z0-9_./-]+)`", text)}
    if links:
        found |= {m.split("#")[0] for m in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in m}
    return {p for p in found if p.startswith(TOP_FOLDERS)}


def exists(path: str) -> bool:
    """A file, or a folder with a file in it (a folder left holding only ``__pycache__`` does not count)."""
    target = REPO / path
    if target.is_dir():
        return any(f.is_file() and "__pycache__" not in f.parts for f in target.rglob("*"))
    return target.is_file()


def test_repository_paths_named_in_the_readme_and_the_docs_exist() -> None:
    """The measurement reports are records of their day and keep the paths of that day."""
    readme = REPO / "README.md"
    pages = [readme, *(p for p in sorted((REPO / "docs").rglob("*.md")) if "measurements" not in p.parts)]
    missing = {
        f"{page.relative_to(REPO)}: {path}"
        for page in pages
        for path in named_paths(page.read_text(), links=page == readme)
        if not exists(path) and path not in WRITTEN_ELSEWHERE
    }
    assert not missing, sorted(missing)
