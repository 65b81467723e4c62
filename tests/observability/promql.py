"""What the observability tests share: the alert rules split into query and threshold, the dashboards'
queries, the metric names a PromQL expression reads, and Grafana's variables replaced by values."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
RULES_DIR = REPO / "deploy/prometheus/rules"
RULE_TESTS_DIR = REPO / "deploy/prometheus/tests"
GRAFANA = REPO / "grafana"
DASHBOARDS_DIR = GRAFANA / "dashboards"
ALERTING_FILE = GRAFANA / "provisioning/alerting/llmgw.yml"
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}
# Dashboards name their datasource through the variable ``$datasource`` (of type prometheus, defaulting to
# the provisioned one), so an operator's own Prometheus datasource can be picked; alert rules keep the uid.
DASHBOARD_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Panels and rules that read metrics this stack cannot produce carry this marker (panel description /
# rule annotation `requires`): the NVIDIA DCGM exporter's GPU metrics. The live test skips exactly those.
DCGM_MARKER = "[requires: dcgm-exporter]"
DCGM_REQUIRES = "dcgm-exporter"

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class AlertRule:
    group: str
    name: str
    expr: str
    query: str
    op: str
    threshold: float
    duration: str
    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def needs_dcgm(self) -> bool:
        return self.annotations.get("requires") == DCGM_REQUIRES


# `<query> <op> <threshold>` at the very end of the expression; the query is what is left before it.
_THRESHOLD = re.compile(
    r"^(?P<query>.+?)\s*(?P<op>[<>])\s*(?P<value>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*$", re.S
)
_SET_OPS = re.compile(r"\b(?:and|or|unless)\b")
_COMPARISONS = re.compile(r"==|!=|>=|<=|(?<![=!])[<>](?!=)")


def top_level(expr: str) -> str:
    """The expression with everything inside brackets, braces, parentheses and strings blanked out."""
    out, depth, quote = [], 0, ""
    for ch in expr:
        if quote:
            quote = "" if ch == quote else quote
            out.append(" ")
        elif ch in "\"'`":
            quote = ch
            out.append(" ")
        elif ch in "([{":
            depth += 1
            out.append(" ")
        elif ch in ")]}":
            depth -= 1
            out.append(" ")
        else:
            out.append(ch if depth == 0 else " ")
    if depth != 0 or quote:
        raise ValueError(f"unbalanced expression: {expr!r}")
    return "".join(out)


def split_threshold(expr: str) -> tuple[str, str, float]:
    """Split an alert's `<query> > <threshold>` (or `<`); refuse anything else, so that the query alone is
    exactly what the alert compares (no top-level and/or/unless that the comparison would bind inside)."""
    m = _THRESHOLD.match(expr.strip())
    if m is None:
        raise ValueError(f"alert expression is not `<query> > <threshold>`: {expr!r}")
    query = m.group("query").strip()
    rest = top_level(query)
    if _SET_OPS.search(rest) or _COMPARISONS.search(rest):
        raise ValueError(f"the query part has a top-level set operator or comparison: {query!r}")
    return query, m.group("op"), float(m.group("value"))


def rule_files() -> list[Path]:
    return sorted(RULES_DIR.glob("*.yml"))


def load_alert_rules() -> list[AlertRule]:
    rules = []
    for path in rule_files():
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" not in rule:
                    continue
                query, op, threshold = split_threshold(rule["expr"])
                rules.append(
                    AlertRule(
                        group=group["name"],
                        name=rule["alert"],
                        expr=rule["expr"],
                        query=query,
                        op=op,
                        threshold=threshold,
                        duration=str(rule.get("for", "0s")),
                        labels=dict(rule.get("labels", {})),
                        annotations=dict(rule.get("annotations", {})),
                    )
                )
    return rules


# ---- dashboards -------------------------------------------------------------------------------------


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS_DIR.glob("*.json"))


def load_dashboard(path: Path) -> JsonDict:
    data: JsonDict = json.loads(path.read_text())
    return data


def panels(dashboard: JsonDict) -> Iterator[JsonDict]:
    """Every panel, rows' nested (collapsed) panels included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def variable_query(variable: JsonDict) -> str:
    query = variable.get("query", "")
    return str(query.get("query", "") if isinstance(query, dict) else query)


_LABEL_VALUES = re.compile(r"^label_values\(\s*(?P<metric>.+?)\s*,\s*(?P<label>[A-Za-z_]\w*)\s*\)$", re.S)


def label_values_as_query(definition: str) -> str:
    """Grafana's `label_values(<selector>, <label>)` as a PromQL query with one series per value."""
    m = _LABEL_VALUES.match(definition.strip())
    if m is None:
        raise ValueError(f"unsupported variable query: {definition!r}")
    return f"count by ({m.group('label')}) ({m.group('metric')})"


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """Replace Grafana's $name / ${name} variables by values (longest names first)."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return expr


_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def variables_in(expr: str) -> set[str]:
    return {a or b for a, b in _VARIABLE.findall(expr)}


# ---- metric names -----------------------------------------------------------------------------------

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool"}
_KEYWORDS |= {"offset", "inf", "nan"}
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (not functions, keywords, labels, durations or numbers)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\$\{?\w+\}?", " ", s)
    s = re.sub(r"(?<![\w:])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", " ", s)
    names = set()
    for m in _IDENT.finditer(s):
        if m.group(0).lower() in _KEYWORDS or s[m.end() :].lstrip().startswith("("):
            continue
        names.add(m.group(0))
    return names


# Grafana's own variables, as the live test fills them in. The stack scrapes every 5 s, so Grafana's
# $__rate_interval would be 20 s at short ranges; 1m leaves room for one missed scrape.
GRAFANA_BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}
GRAFANA_GLOBALS = {"__interval_ms", "__range_s", "__range_ms", "__from", "__to", "__dashboard", "__org"}
GRAFANA_GLOBALS |= {"__user", "__name", "__timeFilter", *GRAFANA_BUILTINS}


def concrete(expr: str, variables: Mapping[str, str]) -> str:
    """A dashboard query with Grafana's variables and the dashboard's own replaced by values."""
    return substitute(expr, {**GRAFANA_BUILTINS, **variables})


# ---- the metric names this system exposes -----------------------------------------------------------

DCGM_METRICS = {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"}
PROMETHEUS_METRICS = {"up"}
_EXPOSED = {"gauge": ("",), "counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}


def exposed(name: str, kind: str) -> set[str]:
    """The sample names a metric family of this type puts on /metrics."""
    return {name + suffix for suffix in _EXPOSED.get(kind, ("",))}


def registry_names(registry: Any) -> set[str]:
    """Sample names of a prometheus_client registry (families without a child yet included)."""
    return {n for family in registry.collect() for n in exposed(family.name, family.type)}


_VLLM_DECL = re.compile(r'_(gauge|counter|histogram)_cls\(\s*name="(vllm:[a-z0-9_:]+)"')


def vllm_metric_names() -> set[str] | None:
    """The sample names the installed vLLM declares (read from its source, without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        return None
    loggers = Path(spec.origin).parent / "v1/metrics/loggers.py"
    if not loggers.is_file():
        return None
    return {n for kind, name in _VLLM_DECL.findall(loggers.read_text()) for n in exposed(name, kind)}
