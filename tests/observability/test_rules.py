"""The Prometheus alert rules: promtool accepts them, promtool's unit tests pass (each alert fires on a bad
case and stays quiet on a good one), they match the issue's thresholds, and the stack's rendered
Prometheus config loads them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from llmgw_tools.stack.render import prometheus_conf
from tests.observability.promql import REPO, RULE_TESTS_DIR, AlertRule, load_alert_rules, rule_files

PROMTOOL = shutil.which("promtool") or shutil.which("promtool", path="/usr/bin:/usr/local/bin")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (make install does)")

# alert: (comparison, threshold, for, severity): the issue's thresholds, pinned.
EXPECTED = {
    "LLMGWLatencyP99High": (">", 0.5, "5m", "warning"),
    "LLMGWErrorRateHigh": (">", 0.01, "5m", "critical"),
    "LLMGWModelNoReadyReplica": ("<", 1.0, "1m", "critical"),
    "LLMGWQueueWaitHigh": (">", 2.5, "5m", "warning"),
    "LLMGWRedisDegraded": (">", 0.0, "1m", "warning"),
    "LLMGWKVCacheHigh": (">", 0.85, "5m", "warning"),
    "LLMGWGPUMemoryHigh": (">", 0.85, "5m", "warning"),
    "LLMGWReplicaRestarting": (">", 1.0, "0s", "warning"),
    "LLMGWFleetChangeFailed": (">", 0.0, "0s", "warning"),
    "LLMGWWakeFailed": (">", 0.0, "0s", "warning"),
    "LLMGWScaleShort": (">", 0.0, "10m", "warning"),
    "LLMGWHeldPastETA": (">", 0.2, "0s", "warning"),
    "LLMGWTargetDown": ("<", 1.0, "2m", "warning"),
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False)


def unit_test_files() -> list[Path]:
    return sorted(RULE_TESTS_DIR.glob("*.yml"))


@needs_promtool
def test_promtool_check_rules() -> None:
    out = promtool("check", "rules", *map(str, rule_files()))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(EXPECTED)} rules found" in out.stdout


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    out = promtool("test", "rules", *map(str, unit_test_files()))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for path in unit_test_files():
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {r.name for r in load_alert_rules()}
    assert names - fires == set(), "alerts without a unit test where they fire"
    assert names - quiet == set(), "alerts without a unit test where they stay quiet"


def test_alerts_match_the_issue() -> None:
    rules = load_alert_rules()
    got = {r.name: (r.op, r.threshold, r.duration, r.labels.get("severity")) for r in rules}
    assert got == EXPECTED
    assert len(rules) == len(got), "duplicate alert names"


@pytest.mark.parametrize("rule", load_alert_rules(), ids=lambda r: r.name)
def test_alert_says_what_it_means_and_what_to_do(rule: AlertRule) -> None:
    assert rule.labels.get("severity") in {"critical", "warning"}
    assert rule.annotations.get("summary", "").strip()
    assert len(rule.annotations.get("description", "")) > 150, "description: what it means, what to do"


@needs_promtool
def test_stack_prometheus_config_loads_the_rules(tmp_path: Path) -> None:
    """The config llmgw-stack renders (make run, e2e) passes `promtool check config`, rules included."""
    sd_file = tmp_path / "workers.json"
    sd_file.write_text("[]")
    conf = tmp_path / "prometheus.yml"
    rules = str(REPO / "deploy/prometheus/rules/*.yml")
    text = prometheus_conf(
        REPO / "deploy/prometheus/prometheus.yml.template",
        ["127.0.0.1:9001", "127.0.0.1:9002"],
        "127.0.0.1:9400",
        sd_file,
        rules,
    )
    conf.write_text(text)
    out = promtool("check", "config", str(conf))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(EXPECTED)} rules found" in out.stdout
