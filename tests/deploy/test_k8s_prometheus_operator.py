"""deploy/k8s/components/prometheus-operator (the optional kustomize component) through the overlay
deploy/k8s-prometheus-operator, validated offline: `kubectl kustomize` builds it, the PodMonitors and the
PrometheusRule pass the operator's CRD schemas (tests/deploy/crds/, vendored from prometheus-operator), the
rule is deploy/prometheus/rules/llmgw.yml's and the monitors scrape what the base's Prometheus scrapes."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from llmgw_tools.deploy.common import ALERT_RULES, REPO
from tests.deploy.test_k8s import strict

OVERLAY = REPO / "deploy" / "k8s-prometheus-operator"
COMPONENT = "../k8s/components/prometheus-operator"
CRDS = Path(__file__).parent / "crds"
KUBECTL = str(Path(sys.executable).parent / "kubectl")
OPERATOR_KINDS = {"PodMonitor": "podmonitors", "PrometheusRule": "prometheusrules"}
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], Obj]:
    built = subprocess.run([KUBECTL, "kustomize", str(OVERLAY)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(built.stdout) if d}


def validator(kind: str) -> jsonschema.Draft7Validator:
    crd = yaml.safe_load((CRDS / f"monitoring.coreos.com_{OPERATOR_KINDS[kind]}.yaml").read_text())
    assert crd["spec"]["names"]["kind"] == kind
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft7Validator(schema)


def of_kind(objects: dict[tuple[str, str], Obj], kind: str) -> dict[str, Obj]:
    return {name: o for (k, name), o in objects.items() if k == kind}


def test_the_component_is_optional_and_adds_its_objects_to_the_namespace(
    objects: dict[tuple[str, str], Obj],
) -> None:
    base = yaml.safe_load((REPO / "deploy" / "k8s" / "kustomization.yaml").read_text())
    assert "components" not in base  # the base ships its own Prometheus and needs no operator
    overlay = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())
    assert overlay["components"] == [COMPONENT] and overlay["resources"] == ["../k8s"]
    assert set(of_kind(objects, "PodMonitor")) == {"llmgw-gateway", "llmgw-vllm", "llmgw-supervisor"}
    assert set(of_kind(objects, "PrometheusRule")) == {"llmgw"}
    assert ("Deployment", "prometheus") in objects  # the base, unchanged
    added = [o for (k, _), o in objects.items() if k in OPERATOR_KINDS]
    added.append(objects[("NetworkPolicy", "vllm-prometheus-operator")])
    assert all(o["metadata"]["namespace"] == "llmgw" for o in added)
    kubernetes_validate.validate(added[-1], kubernetes_validate.latest_version(), strict=True)


def test_monitors_and_rule_pass_the_operators_crd_schemas(objects: dict[tuple[str, str], Obj]) -> None:
    for kind in OPERATOR_KINDS:
        check = validator(kind)
        for name, o in of_kind(objects, kind).items():
            assert o["apiVersion"] == "monitoring.coreos.com/v1"
            assert [e.message for e in check.iter_errors(o)] == [], name
    # The check has teeth: a misspelt field and a rule without expr are refused.
    monitor = copy.deepcopy(of_kind(objects, "PodMonitor")["llmgw-vllm"])
    monitor["spec"]["podMetricEndpoints"] = monitor["spec"].pop("podMetricsEndpoints")
    rule = copy.deepcopy(of_kind(objects, "PrometheusRule")["llmgw"])
    del rule["spec"]["groups"][0]["rules"][0]["expr"]
    messages = [e.message for e in validator("PodMonitor").iter_errors(monitor)]
    messages += [e.message for e in validator("PrometheusRule").iter_errors(rule)]
    assert any("podMetricEndpoints" in m for m in messages) and "'expr' is a required property" in messages


def test_the_vendored_crds_are_valid_crds() -> None:
    for plural in OPERATOR_KINDS.values():
        crd = yaml.safe_load((CRDS / f"monitoring.coreos.com_{plural}.yaml").read_text())
        kubernetes_validate.validate(crd, kubernetes_validate.latest_version(), strict=True)


def test_the_rule_carries_the_alert_rules_of_the_repo(objects: dict[tuple[str, str], Obj]) -> None:
    rule = of_kind(objects, "PrometheusRule")["llmgw"]
    assert rule["spec"]["groups"] == yaml.safe_load(ALERT_RULES.read_text())["groups"]


def test_monitors_scrape_what_the_bases_prometheus_scrapes(objects: dict[tuple[str, str], Obj]) -> None:
    """Same pods, ports, job names and target labels as deploy/k8s/prometheus/prometheus.yml, so the
    dashboards and the alert rules read the same series under either Prometheus."""
    conf = yaml.safe_load((REPO / "deploy/k8s/prometheus/prometheus.yml").read_text())
    want = {}
    for job in conf["scrape_configs"]:
        keep, *labels = job["relabel_configs"]
        want[job["job_name"]] = (keep["regex"], {r["target_label"]: r["source_labels"][0] for r in labels})
    got = {}
    for monitor in of_kind(objects, "PodMonitor").values():
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        job, *labels = endpoint["relabelings"]
        assert job["targetLabel"] == "job" and endpoint["path"] == "/metrics"
        pods = monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
        got[job["replacement"]] = (
            f"{pods};{endpoint['port']}",
            {r["targetLabel"]: r["sourceLabels"][0] for r in labels},
        )
    assert got == want
