"""Pictures of the Grafana dashboards: each panel where the dashboard JSON places it, with its title and
kind, drawn as SVG (no Grafana runs here to take a screenshot; this layout cannot drift from the JSON)."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from docsgen import REPO

DASHBOARDS = REPO / "grafana" / "dashboards"
COLUMN, ROW = 40, 22  # pixels per grid column (24 across) and per grid row
FILL = {"row": "#e8eaf6", "stat": "#e3f2fd", "timeseries": "#f1f8e9"}
ICON = {"stat": "stat", "timeseries": "graph", "table": "table", "bargauge": "bars", "gauge": "gauge"}


def dashboards() -> list[Path]:
    return sorted(DASHBOARDS.glob("*.json"))


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    found: list[dict[str, Any]] = []
    for panel in dashboard.get("panels", []):
        found += [panel, *panel.get("panels", [])]
    return found


def fitted(title: str, width: int) -> str:
    """The title cut with an ellipsis where it would overflow its box (about 6.5 pixels a character)."""
    room = max(4, int((width - 16) / 6.5))
    return escape(title if len(title) <= room else title[: room - 1] + "…")


def box(panel: dict[str, Any]) -> str:
    pos = panel["gridPos"]
    x, y, w, h = pos["x"] * COLUMN, pos["y"] * ROW + 30, pos["w"] * COLUMN, pos["h"] * ROW
    kind = panel.get("type", "")
    title = fitted(panel.get("title", ""), w)
    if kind == "row":
        return (
            f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{FILL["row"]}"/>'
            f'<text x="{x + 6}" y="{y + 15}" font-weight="bold">{title}</text>'
        )
    label = ICON.get(kind, kind)
    return (
        f'<rect x="{x + 2}" y="{y + 2}" width="{w - 4}" height="{h - 4}" rx="4" '
        f'fill="{FILL.get(kind, "#fafafa")}" stroke="#90a4ae"/>'
        f'<text x="{x + 8}" y="{y + 18}">{title}</text>'
        f'<text x="{x + 8}" y="{y + 34}" fill="#78909c" font-size="10">{label}</text>'
    )


def render_svg(path: Path) -> str:
    dashboard = json.loads(path.read_text())
    found = panels(dashboard)
    height = max((p["gridPos"]["y"] + p["gridPos"]["h"] for p in found), default=0) * ROW + 34
    width = 24 * COLUMN
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="6" y="20" font-size="15" font-weight="bold">{escape(dashboard["title"])}</text>',
        *(box(panel) for panel in found),
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def pages() -> dict[str, str]:
    """``docs/img/dashboard-<uid>.svg`` for every dashboard file."""
    found = {}
    for path in dashboards():
        uid = json.loads(path.read_text())["uid"]
        found[f"docs/img/dashboard-{uid}.svg"] = render_svg(path)
    return found
