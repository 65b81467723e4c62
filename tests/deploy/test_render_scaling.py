"""The rendered ScaledObjects follow each model's scaling rule: bounds, delay, the external-push trigger to
llmgw-scaler by default and the Prometheus query as the option; both pass KEDA's schema. The scaler's image
passes hadolint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from llmgw_contract.fleet import parse_fleet
from llmgw_tools.deploy.cli import main
from llmgw_tools.deploy.common import REPO
from llmgw_tools.deploy.k8s import K8sOptions, render_k8s
from tests.deploy.test_k8s import keda_validator

FLEET = """models:
 - name: cold
   source: {package: x}
   activation: on_demand
   scaling: {min_replicas: 0, max_replicas: 3, target_per_replica: 4, scale_down_delay_s: 45}
 - name: fixed
   source: {package: y}
   replicas: 2
"""


def scaled(options: K8sOptions | None = None) -> dict[str, dict[str, Any]]:
    files = render_k8s(parse_fleet(FLEET), FLEET, options)
    out = {}
    for name in ("cold", "fixed"):
        docs = [d for d in yaml.safe_load_all(files[f"models/{name}.yaml"]) if d]
        out[name] = next(d for d in docs if d["kind"] == "ScaledObject")
    return out


def test_bounds_and_delay_come_from_the_rule() -> None:
    so = scaled()
    cold = so["cold"]["spec"]
    assert (cold["minReplicaCount"], cold["maxReplicaCount"], cold["cooldownPeriod"]) == (0, 3, 45)
    down = cold["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert down["stabilizationWindowSeconds"] == 45
    fixed = so["fixed"]["spec"]  # no rule: what the cluster did before rules (replicas up to 4x)
    assert (fixed["minReplicaCount"], fixed["maxReplicaCount"]) == (2, 8)


def test_the_default_trigger_is_pushed_by_the_scaler_and_prometheus_stays_an_option() -> None:
    (push,) = scaled()["cold"]["spec"]["triggers"]
    assert push == {
        "type": "external-push",
        "name": "demand",
        "metadata": {"scalerAddress": "llmgw-scaler.llmgw.svc:9090", "model": "cold"},
    }
    (prom,) = scaled(K8sOptions(trigger="prometheus"))["cold"]["spec"]["triggers"]
    assert prom["type"] == "prometheus" and prom["metadata"]["threshold"] == "4"
    assert 'llmgw_queue_depth{model="cold"}' in prom["metadata"]["query"]


def test_both_triggers_pass_kedas_schema() -> None:
    validator = keda_validator()
    for options in (K8sOptions(), K8sOptions(trigger="prometheus")):
        for so in scaled(options).values():
            assert [e.message for e in validator.iter_errors(so)] == []


def test_the_scaler_image_carries_the_contract_and_the_workers_and_passes_hadolint() -> None:
    dockerfile = REPO / "deploy/docker/Dockerfile.scaler"
    hadolint = str(Path(sys.executable).parent / "hadolint")
    checked = subprocess.run([hadolint, str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    text = dockerfile.read_text()
    copies = [line.split()[1:-1] for line in text.splitlines() if line.startswith("COPY ")]
    copied = {src for sources in copies for src in sources}
    installs = {"requirements/image-build.txt", "requirements/image-scaler.txt", "pyproject.toml", "LICENSE"}
    assert copied == {*installs, "llmgw_contract", "workers"} and "USER 10001:10001" in text


def test_the_prometheus_trigger_queries_the_server_the_render_option_names(tmp_path: Path) -> None:
    """The default stays the base's own Prometheus; `llmgw-render --prometheus-url` names another (the
    Prometheus Operator's, say), and `--trigger prometheus` picks the trigger from the command line."""
    (default,) = scaled(K8sOptions(trigger="prometheus"))["cold"]["spec"]["triggers"]
    assert default["metadata"]["serverAddress"] == "http://prometheus.llmgw.svc:9090"
    url = "http://prometheus-operated.monitoring.svc:9090"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    argv = ["k8s", "--fleet", str(fleet), "--k8s-out", str(tmp_path / "k8s"), "--trigger", "prometheus"]
    assert main([*argv, "--prometheus-url", url]) == 0
    docs = yaml.safe_load_all((tmp_path / "k8s" / "models" / "cold.yaml").read_text())
    (trigger,) = next(d for d in docs if d and d["kind"] == "ScaledObject")["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metadata"]["serverAddress"] == url
