"""The alert reference and runbook: every alerting rule, what it means and what to do, from the rule files."""

from __future__ import annotations

import re
from typing import Any

import yaml

from docsgen import REPO
from docsgen.markdown import heading, one_line, page, table

RULES = REPO / "deploy" / "prometheus" / "rules"
SOURCE = "`deploy/prometheus/rules/` (mirrored for Grafana in `grafana/provisioning/alerting/`)"
INTRO = """Every alert, from the rule files Prometheus loads (`make run`, compose and Kubernetes); the Grafana
copy in `grafana/provisioning/alerting/llmgw.yml` holds the same rules. Severity `critical`: users are
failing now (page). `warning`: capacity or degradation (act the same day). Each entry says what fires it,
what it means and what to do; the [runbook](../operations/runbook.md) adds the dashboards and the common
failures."""


def rules() -> list[dict[str, Any]]:
    """Every alerting rule of every rule file, in file and group order."""
    found: list[dict[str, Any]] = []
    for path in sorted(RULES.glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            found += [rule for rule in group["rules"] if "alert" in rule]
    return found


def readable(template: str) -> str:
    """An annotation template as prose: ``{{ $labels.model }}`` reads *model*, ``{{ $value }}`` *the
    value*."""
    text = re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", r"*\1*", template)
    return one_line(re.sub(r"\{\{\s*\$value[^}]*\}\}", "*the value*", text))


def waits(rule: dict[str, Any]) -> str:
    return f"after {rule['for']}" if rule.get("for") else "at once"


def entry(rule: dict[str, Any]) -> list[str]:
    name = rule["alert"]
    annotations = rule.get("annotations", {})
    return [
        heading(2, f"`{name}`", name.lower()),
        "",
        f"**{rule.get('labels', {}).get('severity', 'none')}**, {waits(rule)}: "
        + readable(annotations.get("summary", "")),
        "",
        "```promql",
        rule["expr"].strip(),
        "```",
        "",
        one_line(annotations.get("description", "")),
        "",
    ]


def render() -> str:
    found = rules()
    summary = table(
        ["alert", "severity", "fires"],
        [
            [f"[`{r['alert']}`](#{r['alert'].lower()})", r.get("labels", {}).get("severity", ""), waits(r)]
            for r in found
        ],
    )
    body = [*summary, ""]
    for rule in found:
        body += entry(rule)
    return page("Alerts", SOURCE, INTRO, body)
