"""The generated pages: where each goes, and the function that writes it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from docsgen import REPO, alerts_ref, cli_ref, dashboards_ref, fleet_ref, metrics_ref, settings_ref

PAGES: tuple[tuple[str, Callable[[], str]], ...] = (
    ("docs/reference/fleet.md", fleet_ref.render),
    ("docs/reference/settings.md", settings_ref.render),
    ("docs/reference/cli.md", cli_ref.render),
    ("docs/reference/metrics.md", metrics_ref.render),
    ("docs/reference/alerts.md", alerts_ref.render),
)
REGENERATE = "python -m docsgen  (make reference)"


def rendered() -> dict[str, str]:
    """Repository path -> the page's text as the code makes it now."""
    return {**{path: render() for path, render in PAGES}, **dashboards_ref.pages()}


def stale(pages: dict[str, str], root: Path = REPO) -> list[str]:
    """The pages whose committed text differs from ``pages`` (missing ones included)."""
    return [
        path
        for path, text in pages.items()
        if not (root / path).is_file() or (root / path).read_text() != text
    ]


def write(pages: dict[str, str], root: Path = REPO) -> list[str]:
    """Write the pages that changed; their paths."""
    changed = stale(pages, root)
    for path in changed:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(pages[path])
    return changed
