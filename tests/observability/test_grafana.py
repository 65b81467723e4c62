"""grafana/: the provisioning files, and every dashboard checked as JSON (unique ids, the provisioned
datasource, an expression on every target, defined variables, PromQL that parses, metric names that exist),
and the Grafana-managed alert rules in step with the Prometheus ones."""

from __future__ import annotations

import re
import shutil
import subprocess
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.metrics import GatewayMetrics
from tests.observability import grafana_alerts
from tests.observability.promql import (
    ALERTING_FILE,
    DASHBOARD_DATASOURCE,
    DATASOURCE,
    DCGM_MARKER,
    DCGM_METRICS,
    GRAFANA,
    GRAFANA_GLOBALS,
    PROMETHEUS_METRICS,
    JsonDict,
    concrete,
    dashboard_files,
    label_values_as_query,
    load_alert_rules,
    load_dashboard,
    metric_names,
    panels,
    registry_names,
    variable_query,
    variables_in,
    vllm_metric_names,
)
from workers.life.observe import SupervisorMetrics

DASHBOARDS = {path.name: load_dashboard(path) for path in dashboard_files()}
EXAMPLE_VALUES = {"model": "smollm2-135m-instruct"}  # a value for each dashboard variable


def queries(dashboard: JsonDict) -> list[tuple[str, str]]:
    """(where, expr) of every panel target and every query variable of a dashboard."""
    out = []
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            out.append(
                (f"panel {panel['id']} {panel['title']!r} {target.get('refId')}", target.get("expr", ""))
            )
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            out.append((f"variable ${variable['name']}", label_values_as_query(variable_query(variable))))
    return out


def all_queries() -> list[tuple[str, str]]:
    found = [(f"{name} {where}", expr) for name, d in DASHBOARDS.items() for where, expr in queries(d)]
    found += [(f"alert {r.name}", r.query) for r in load_alert_rules()]
    return found


def test_there_are_the_three_dashboards() -> None:
    assert {d["uid"] for d in DASHBOARDS.values()} == {"llmgw-fleet", "llmgw-model", "llmgw-admission"}
    assert len({d["title"] for d in DASHBOARDS.values()}) == len(DASHBOARDS)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_structure(name: str) -> None:
    d = DASHBOARDS[name]
    assert d["uid"] and len(d["uid"]) <= 40
    assert d["title"] and 36 <= d["schemaVersion"] <= 41
    assert d.get("id") is None, "provisioned dashboards carry no database id"
    ids = [p["id"] for p in panels(d)]
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {name}"
    assert all(isinstance(i, int) for i in ids)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_panels_do_not_overlap(name: str) -> None:
    def box(p: JsonDict) -> tuple[int, int, int, int]:
        g = p["gridPos"]
        return g["x"], g["y"], g["x"] + g["w"], g["y"] + g["h"]

    placed = [(p["title"], box(p)) for p in panels(DASHBOARDS[name])]
    assert all(0 <= b[0] < b[2] <= 24 for _, b in placed)
    for (t1, a), (t2, b) in combinations(placed, 2):
        overlap = a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
        assert not overlap, f"{t1!r} overlaps {t2!r}"


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_target_has_an_expr_and_the_provisioned_datasource(name: str) -> None:
    for panel in panels(DASHBOARDS[name]):
        if panel["type"] == "row":
            assert not panel.get("targets")
            continue
        where = f"{name} panel {panel['id']} {panel['title']!r}"
        assert panel.get("datasource") == DASHBOARD_DATASOURCE, where
        targets = panel.get("targets", [])
        assert targets, f"{where} has no target"
        assert len({t["refId"] for t in targets}) == len(targets), where
        for target in targets:
            assert target.get("datasource") == DASHBOARD_DATASOURCE, where
            assert target.get("expr", "").strip(), f"{where} target {target.get('refId')} has no expr"
    for variable in DASHBOARDS[name].get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            assert variable.get("datasource") == DASHBOARD_DATASOURCE, variable["name"]


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_dashboard_has_a_datasource_variable(name: str) -> None:
    """``$datasource``, first, of type prometheus, defaulting to the provisioned uid: an operator's Grafana
    with its own Prometheus datasource picks it in the dashboard instead of editing the JSON."""
    first = DASHBOARDS[name]["templating"]["list"][0]
    assert (first["name"], first["type"], first["query"]) == ("datasource", "datasource", "prometheus")
    assert first["current"]["value"] == DATASOURCE["uid"]
    text = (GRAFANA / "dashboards" / name).read_text()
    assert f'"uid": "{DATASOURCE["uid"]}"' not in text, "a datasource uid written out instead of $datasource"


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_template_variables_are_defined(name: str) -> None:
    d = DASHBOARDS[name]
    defined = {v["name"] for v in d.get("templating", {}).get("list", []) if v["type"] != "datasource"}
    assert defined <= set(EXAMPLE_VALUES), "give new variables an example value in EXAMPLE_VALUES"
    texts = [expr for _, expr in queries(d)] + [p.get("title", "") for p in panels(d)]
    used = set().union(*(variables_in(t) for t in texts))
    assert used - defined - GRAFANA_GLOBALS == set(), f"undefined variables in {name}"
    assert defined - used == set(), f"variables defined and never used in {name}"


def test_the_model_dashboard_has_its_variable() -> None:
    d = DASHBOARDS["llmgw-model.json"]
    (variable,) = [v for v in d["templating"]["list"] if v["type"] != "datasource"]
    assert variable["name"] == "model"
    assert variable_query(variable) == "label_values(llmgw_ready_replicas, model)"
    assert not variable["multi"] and not variable["includeAll"]


def test_dcgm_panels_are_marked_exactly() -> None:
    """The live test skips exactly the panels and rules marked as needing the DCGM exporter."""
    for name, d in DASHBOARDS.items():
        for panel in panels(d):
            reads = set().union(*(metric_names(t.get("expr", "")) for t in panel.get("targets", [])))
            marked = DCGM_MARKER in panel.get("description", "")
            assert marked == bool(reads & DCGM_METRICS), f"{name} {panel['title']!r}"
            if marked:
                assert reads <= DCGM_METRICS, f"{name} {panel['title']!r} mixes DCGM and other metrics"
                assert all(m in panel["description"] for m in DCGM_METRICS), "name the DCGM metrics"
    for rule in load_alert_rules():
        assert rule.needs_dcgm == bool(metric_names(rule.query) & DCGM_METRICS), rule.name
    dcgm = sum(DCGM_MARKER in p.get("description", "") for d in DASHBOARDS.values() for p in panels(d))
    assert dcgm >= 1


def test_every_metric_name_exists() -> None:
    """No typo survives: every metric a query reads is exposed by the gateway, the supervisor, vLLM (as
    the installed vLLM declares it), the DCGM exporter, or Prometheus itself."""
    known = registry_names(GatewayMetrics().registry) | registry_names(SupervisorMetrics().registry)
    known |= DCGM_METRICS | PROMETHEUS_METRICS
    vllm = vllm_metric_names()
    unknown = {}
    for where, expr in all_queries():
        names = metric_names(expr)
        assert names, f"{where} reads no metric: {expr}"
        missing = {n for n in names - known if not (n.startswith("vllm:") and vllm is None)}
        missing -= vllm or set()
        if missing:
            unknown[where] = missing
    assert unknown == {}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (make install does)")
def test_every_query_parses(tmp_path: Path) -> None:
    """promtool parses every dashboard query (variables filled in) as a recording rule."""
    rules = [
        {"record": f"dashboard:query:{i}", "expr": concrete(expr, EXAMPLE_VALUES)}
        for i, (_, expr) in enumerate(all_queries())
    ]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    out = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules)} rules found" in out.stdout


# ---- provisioning -----------------------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_datasource_provisioning() -> None:
    files = sorted((GRAFANA / "provisioning/datasources").glob("*.yml"))
    sources = [s for f in files for s in load_yaml(f)["datasources"]]
    assert [(s["uid"], s["type"]) for s in sources] == [(DATASOURCE["uid"], DATASOURCE["type"])]
    assert sources[0]["url"].startswith("http")


def test_dashboard_provisioning_points_at_the_dashboards() -> None:
    (path,) = sorted((GRAFANA / "provisioning/dashboards").glob("*.yml"))
    data = load_yaml(path)
    assert data["apiVersion"] == 1
    (provider,) = data["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    compose = (GRAFANA.parent / "compose.yaml").read_text()
    assert f"./grafana/dashboards:{provider['options']['path']}" in compose


def test_grafana_alert_rules_are_in_step_with_prometheus() -> None:
    assert ALERTING_FILE.read_text() == grafana_alerts.render(), (
        "regenerate: .venv/bin/python -m tests.observability.grafana_alerts --write"
    )


def test_grafana_alert_rules_shape() -> None:
    data = load_yaml(ALERTING_FILE)
    rules = [r for g in data["groups"] for r in g["rules"]]
    assert len(rules) == len(load_alert_rules())
    assert len({r["uid"] for r in rules}) == len(rules)
    for rule in rules:
        refs = {d["refId"]: d for d in rule["data"]}
        assert rule["condition"] in refs
        assert refs["QUERY"]["datasourceUid"] == DATASOURCE["uid"]
        assert refs["QUERY"]["model"]["expr"].strip()
        assert refs["THRESHOLD"]["model"]["expression"] == "QUERY"
        assert rule["labels"]["severity"] in {"critical", "warning"}
        text = " ".join(rule["annotations"].values())
        assert not re.search(r"\$value\b", text), "in Grafana the number is $values.QUERY.Value"
