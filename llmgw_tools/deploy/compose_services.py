"""compose.yaml's health checks and its monitoring services (Prometheus, Alertmanager, Grafana)."""

from __future__ import annotations

from typing import Any

from llmgw_tools.deploy.common import ALERTMANAGER_CONF, ALERTMANAGER_PORT, REPO

Obj = dict[str, Any]
COMPOSE_CONFIG_DIR = "deploy/compose"
HEALTHY = {"condition": "service_healthy"}


def wget_check(url: str) -> list[str]:
    return ["CMD", "wget", "-q", "-O", "/dev/null", url]


def healthcheck(test: list[str], interval_s: int = 10, start_s: int = 30, retries: int = 3) -> Obj:
    return {
        "test": test,
        "interval": f"{interval_s}s",
        "timeout": "5s",
        "retries": retries,
        "start_period": f"{start_s}s",
        "start_interval": "2s",
    }


def prometheus(image: str) -> Obj:
    return {
        "image": image,
        "command": [
            "--config.file=/etc/prometheus/prometheus.yml",
            "--storage.tsdb.path=/prometheus",
            "--web.enable-lifecycle",
        ],
        "volumes": [
            f"./{COMPOSE_CONFIG_DIR}/prometheus.yml:/etc/prometheus/prometheus.yml:ro",
            f"./{COMPOSE_CONFIG_DIR}/workers.json:/etc/prometheus/workers.json:ro",
            "./deploy/prometheus/rules:/etc/prometheus/rules:ro",
            "prometheus-data:/prometheus",
        ],
        "ports": ["127.0.0.1:${PROMETHEUS_PORT:-9090}:9090"],
        "healthcheck": healthcheck(wget_check("http://127.0.0.1:9090/-/ready")),
        "restart": "unless-stopped",
    }


def alertmanager(image: str) -> Obj:
    """Alertmanager with deploy/alertmanager/alertmanager.yml; Prometheus sends it every alert."""
    port = ALERTMANAGER_PORT
    return {
        "image": image,
        "command": ["--config.file=/etc/alertmanager/alertmanager.yml", "--storage.path=/alertmanager"],
        "volumes": [
            f"./{ALERTMANAGER_CONF.relative_to(REPO)}:/etc/alertmanager/alertmanager.yml:ro",
            "alertmanager-data:/alertmanager",
        ],
        "ports": [f"127.0.0.1:${{ALERTMANAGER_PORT:-{port}}}:{port}"],
        "healthcheck": healthcheck(wget_check(f"http://127.0.0.1:{port}/-/ready")),
        "restart": "unless-stopped",
    }


def grafana(image: str) -> Obj:
    return {
        "image": image,
        "environment": {"GF_USERS_ALLOW_SIGN_UP": "false", "GF_ANALYTICS_REPORTING_ENABLED": "false"},
        "volumes": [
            "./grafana/provisioning:/etc/grafana/provisioning:ro",
            "./grafana/dashboards:/var/lib/grafana/dashboards:ro",
            "grafana-data:/var/lib/grafana",
        ],
        "ports": ["127.0.0.1:${GRAFANA_PORT:-3000}:3000"],
        "depends_on": {"prometheus": HEALTHY},
        "healthcheck": healthcheck(wget_check("http://127.0.0.1:3000/api/health")),
        "restart": "unless-stopped",
    }
