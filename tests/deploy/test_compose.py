"""compose.yaml, validated offline (no Docker engine here): the compose specification's JSON schema
(deploy/schemas/compose-spec.json), health checks and start order, GPU reservations, the files it mounts,
Prometheus' configuration through promtool, and the project's Dockerfile through hadolint."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from llmgw_contract.fleet import load_fleet
from llmgw_tools.deploy.common import ALERTMANAGER_CONF, ALERTMANAGER_PORT, REPO, slug

COMPOSE = REPO / "compose.yaml"
SCHEMA = REPO / "deploy" / "schemas" / "compose-spec.json"
ONE_SHOT = {"tls-init"}
# Mounted folders that the observability side provides (grafana/, alert rules); compose creates a missing one.
OTHERS = {"./grafana/provisioning", "./grafana/dashboards", "./deploy/prometheus/rules"}

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def compose() -> Obj:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def test_compose_file_passes_the_compose_specification(compose: Obj) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []
    broken = {**compose, "services": {"x": {"image": "a", "healthcheck": {"interval": "1s", "tests": []}}}}
    assert any("tests" in e.message for e in validator.iter_errors(broken))  # the check has teeth


def test_every_service_has_a_healthcheck_and_waits_for_healthy_dependencies(compose: Obj) -> None:
    services = compose["services"]
    for name, s in services.items():
        if name in ONE_SHOT:
            assert s["restart"] == "no"
            continue
        assert s["healthcheck"]["test"][0] == "CMD", name
        assert s["restart"] == "unless-stopped", name
        for dep, cond in s.get("depends_on", {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            expected = "service_completed_successfully" if dep in ONE_SHOT else "service_healthy"
            assert cond == {"condition": expected}, f"{name} -> {dep}"
    assert set(services["nginx"]["depends_on"]) == {"gateway-1", "gateway-2", "tls-init"}
    assert services["grafana"]["depends_on"] == {"prometheus": {"condition": "service_healthy"}}
    healthy = {"condition": "service_healthy"}
    assert services["gateway-1"]["depends_on"] == {"redis": healthy, "redis-keys": healthy}
    assert services["register"]["depends_on"] == {"redis": healthy}


def workers(compose: Obj) -> dict[str, Obj]:
    return {n: s for n, s in compose["services"].items() if n.startswith("vllm-")}


def test_one_gpu_worker_per_replica_of_the_fleet(compose: Obj) -> None:
    fleet = load_fleet(REPO / "fleet.yaml")
    expected = {f"vllm-{slug(m.name)}-{i}" for m in fleet.models if m.managed for i in range(m.replicas)}
    assert set(workers(compose)) == expected
    for name, s in workers(compose).items():
        (device,) = s["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"], name
        assert all(re.fullmatch(r"\d+", d) for d in device["device_ids"]), name
        assert s["shm_size"].endswith("gb") and "/models:ro" in s["volumes"][0], name
        assert s["entrypoint"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
        assert s["command"][s["command"].index("--port") + 1] == "8000"
        assert int(s["healthcheck"]["start_period"].removesuffix("s")) >= 600, name  # model load
        assert "CUDA_VISIBLE_DEVICES" not in s["environment"]


def test_files_it_mounts_and_builds_from_are_in_the_repository(compose: Obj) -> None:
    for name, s in compose["services"].items():
        for volume in s.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./") and source not in OTHERS:
                assert (REPO / source).exists(), f"{name}: {source}"
        if "build" in s:
            assert (REPO / s["build"]["context"] / s["build"]["dockerfile"]).is_file()
    mounted = [v.split(":")[0] for v in compose["services"]["grafana"]["volumes"]]
    assert mounted[:2] == ["./grafana/provisioning", "./grafana/dashboards"]


def test_prometheus_configuration_passes_promtool(tmp_path: Path) -> None:
    config = (REPO / "deploy/compose/prometheus.yml").read_text()
    config = config.replace("/etc/prometheus/workers.json", str(REPO / "deploy/compose/workers.json"))
    config = config.replace("/etc/prometheus/rules/", str(REPO / "deploy/prometheus/rules") + "/")
    (tmp_path / "prometheus.yml").write_text(config)
    argv = ["promtool", "check", "config", str(tmp_path / "prometheus.yml")]
    checked = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "WARNING" not in checked.stdout + checked.stderr
    targets = json.loads((REPO / "deploy/compose/workers.json").read_text())
    assert {t["targets"][0].split(":")[0] for t in targets} == set(
        workers(yaml.safe_load(COMPOSE.read_text()))
    )


def test_project_dockerfile_passes_hadolint() -> None:
    dockerfile = REPO / "deploy/docker/Dockerfile.gateway"
    hadolint = str(Path(sys.executable).parent / "hadolint")
    checked = subprocess.run([hadolint, str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    text = dockerfile.read_text()
    assert "USER 10001:10001" in text and "openssl" in text  # non-root; tls-init needs openssl


def required(name: str) -> str:
    return f"${{{name}:?set {name} in .env, see docs/deployment/index.md}}"


def test_secure_by_default_with_secrets_compose_insists_on(compose: Obj) -> None:
    """Keys on with an admin key, Redis with a password, vLLM with an API key: all three secrets come from
    .env, with `${NAME:?...}` so that compose refuses to start without them (no default secret)."""
    from llmgw_tools.stack.redis import EPHEMERAL_REDIS_ARGS, KEYS_REDIS_ARGS

    services = compose["services"]
    password = required("LLMGW_REDIS_PASSWORD")
    for name, mode in (("redis", EPHEMERAL_REDIS_ARGS), ("redis-keys", KEYS_REDIS_ARGS)):
        s = services[name]
        assert s["command"] == ["redis-server", *mode, "--requirepass", password], name
        assert s["environment"] == {"REDISCLI_AUTH": password}, name
    assert services["redis-keys"]["volumes"] == ["redis-keys:/data"] and "redis-keys" in compose["volumes"]
    assert "volumes" not in services["redis"]
    for g in ("gateway-1", "gateway-2"):
        env = services[g]["environment"]
        assert env["LLMGW_AUTH"] == "true"
        assert env["LLMGW_ADMIN_KEY"] == required("LLMGW_ADMIN_KEY")
        assert env["LLMGW_VLLM_API_KEY"] == required("LLMGW_VLLM_API_KEY")
        assert env["LLMGW_REDIS_URL"] == f"redis://:{password}@redis:6379/0"
        assert env["LLMGW_KEYS_REDIS_URL"] == f"redis://:{password}@redis-keys:6379/0"
    register = services["register"]
    assert register["environment"]["LLMGW_REDIS_URL"] == f"redis://:{password}@redis:6379/0"
    assert register["environment"]["VLLM_API_KEY"] == required("LLMGW_VLLM_API_KEY")
    assert "--redis-url" not in register["command"]
    for name, w in workers(compose).items():
        assert w["environment"]["VLLM_API_KEY"] == required("LLMGW_VLLM_API_KEY"), name
        assert "--api-key" not in w["command"] and "ports" not in w, name


def test_prometheus_sends_alerts_to_the_alertmanager_service(compose: Obj) -> None:
    """The rendered prometheus.yml names compose's Alertmanager service on the port it listens on, and
    that service runs deploy/alertmanager/alertmanager.yml (the file the alert delivery test runs)."""
    config = yaml.safe_load((REPO / "deploy/compose/prometheus.yml").read_text())
    (group,) = config["alerting"]["alertmanagers"]
    assert group["static_configs"] == [{"targets": [f"alertmanager:{ALERTMANAGER_PORT}"]}]
    service = compose["services"]["alertmanager"]
    mounts = dict(v.split(":")[:2] for v in service["volumes"])
    assert mounts[f"./{ALERTMANAGER_CONF.relative_to(REPO)}"] == "/etc/alertmanager/alertmanager.yml"
    assert "--config.file=/etc/alertmanager/alertmanager.yml" in service["command"]
    assert service["ports"] == [f"127.0.0.1:${{ALERTMANAGER_PORT:-{ALERTMANAGER_PORT}}}:{ALERTMANAGER_PORT}"]
    assert service["image"].startswith("${ALERTMANAGER_IMAGE:-prom/alertmanager:")
