"""The timeouts of nginx, the gateway (uvicorn) and the deployments agree with each other:

- the gateway keeps an idle connection longer than nginx keeps its upstream connections, so nginx never
  reuses a connection the gateway is closing (a sporadic 503 on a POST nginx rightly does not retry);
- on SIGTERM the gateway's open requests get their grace, then their planned end, all within uvicorn's
  graceful period, which fits in the pod's terminationGracePeriodSeconds (after preStop), compose's
  stop_grace_period and the embedded stack's wait before SIGKILL; nginx's pod outlasts the gateways'.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi import FastAPI

from gateway.cli import server_config
from gateway.settings import GatewaySettings
from gateway.shutdown import graceful_s
from llmgw_tools.deploy.common import NGINX_TEMPLATE, REPO
from llmgw_tools.stack.stack import Stack, StackConfig

NGINX_CONFS = [NGINX_TEMPLATE, REPO / "deploy/compose/nginx.conf", REPO / "deploy/k8s/nginx/nginx.conf"]


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> GatewaySettings:
    fleet = tmp_path_factory.mktemp("fleet") / "fleet.yaml"
    fleet.write_text("models: []\n")
    return GatewaySettings(fleet_file=fleet)


def upstream_keepalive_s(conf: Path) -> float:
    """keepalive_timeout of the `upstream gateways` block (seconds)."""
    block = re.search(r"upstream gateways \{(.*?)\n\s*\}\n", conf.read_text(), re.S)
    assert block is not None, conf
    found = re.search(r"keepalive_timeout\s+(\d+)s;", block.group(1))
    assert found is not None, f"{conf}: no keepalive_timeout in the upstream block"
    return float(found.group(1))


def k8s_pod(path: str) -> Any:
    """The pod spec of the Deployment in a manifest file."""
    docs = yaml.safe_load_all((REPO / path).read_text())
    (deployment,) = [d for d in docs if d and d["kind"] == "Deployment"]
    return deployment["spec"]["template"]["spec"]


def seconds(text: str) -> float:
    found = re.fullmatch(r"(\d+)s", text)
    assert found is not None, text
    return float(found.group(1))


@pytest.mark.parametrize("conf", NGINX_CONFS, ids=lambda p: str(p.relative_to(REPO)))
def test_gateway_keeps_idle_connections_longer_than_nginx(conf: Path, settings: GatewaySettings) -> None:
    uvicorn = server_config(FastAPI(), settings, "127.0.0.1", 9000)
    assert uvicorn.timeout_keep_alive > upstream_keepalive_s(conf)


def test_graceful_shutdown_covers_the_grace_and_fits_in_the_deployments(settings: GatewaySettings) -> None:
    graceful = server_config(FastAPI(), settings, "127.0.0.1", 9000).timeout_graceful_shutdown
    assert graceful is not None and graceful > settings.shutdown_grace_s
    gateway = k8s_pod("deploy/k8s/gateway.yaml")
    (container,) = gateway["containers"]
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert gateway["terminationGracePeriodSeconds"] >= float(pre_stop[1]) + graceful + 5
    assert (
        k8s_pod("deploy/k8s/nginx.yaml")["terminationGracePeriodSeconds"]
        >= gateway["terminationGracePeriodSeconds"]
    )
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    gateways = [s for name, s in compose.items() if name.startswith("gateway-")]
    assert gateways
    for service in gateways:
        assert seconds(service["stop_grace_period"]) >= graceful + 5
        assert "LLMGW_SHUTDOWN_GRACE_S" not in service["environment"]
        assert "LLMGW_KEEPALIVE_TIMEOUT_S" not in service["environment"]
    env = {e["name"] for e in container["env"]}
    assert not env & {"LLMGW_SHUTDOWN_GRACE_S", "LLMGW_KEEPALIVE_TIMEOUT_S"}


def test_embedded_stack_waits_for_the_gateways_planned_ends(tmp_path: Path) -> None:
    stack = Stack(StackConfig(run_dir=tmp_path))
    service = stack.gateway(1, 9001)
    grace = float(service.env["LLMGW_SHUTDOWN_GRACE_S"])
    assert service.stop_grace_s >= graceful_s(grace) + 2
