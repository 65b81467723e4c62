"""deploy/k8s-redis-sentinel (the base with the state Redis as master + replica + three Sentinels), validated
offline: `kubectl kustomize` builds it, every object passes the Kubernetes schemas (strict), every client of
the state Redis takes the Sentinel URL, the data nodes and Sentinels are wired to each other and hardened."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from llmgw_contract.redis_url import parse
from llmgw_tools.deploy.common import REPO
from llmgw_tools.deploy.k8s_sentinel import SENTINEL_HOSTS, SENTINEL_NAME
from llmgw_tools.deploy.sentinel import SERVICE

OVERLAY = REPO / "deploy" / "k8s-redis-sentinel"
KUBECTL = str(Path(sys.executable).parent / "kubectl")
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], Obj]:
    built = subprocess.run([KUBECTL, "kustomize", str(OVERLAY)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(built.stdout) if d}


def container(objects: dict[tuple[str, str], Obj], kind: str, name: str, which: str) -> Obj:
    pod = objects[(kind, name)]["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == which)


def sentinel_url(text: str) -> None:
    url = parse(text.replace("$(REDIS_PASSWORD)", "0f1e2d"))  # as the kubelet expands it
    assert url.kind == "sentinel" and url.service == SERVICE
    assert [h for h, _ in url.nodes] == list(SENTINEL_HOSTS)
    assert url.password == url.sentinel_password == "0f1e2d"


@pytest.mark.parametrize("version", ["1.29.0", kubernetes_validate.latest_version()])
def test_every_object_passes_the_kubernetes_schemas(
    objects: dict[tuple[str, str], Obj], version: str
) -> None:
    for o in objects.values():
        if not o["apiVersion"].startswith("keda.sh/"):
            kubernetes_validate.validate(o, version, strict=True)


def test_every_state_redis_client_takes_the_sentinel_url(objects: dict[tuple[str, str], Obj]) -> None:
    env = {e["name"]: e for e in container(objects, "Deployment", "gateway", "gateway")["env"]}
    sentinel_url(env["LLMGW_REDIS_URL"]["value"])
    names = [e for e in env]
    assert names.index("REDIS_PASSWORD") < names.index("LLMGW_REDIS_URL")  # the kubelet expands it in order
    assert env["LLMGW_KEYS_REDIS_URL"]["value"].startswith("redis://")  # the key store: one persisted server
    models = [n for k, n in objects if k == "Deployment" and n.startswith("vllm-")]
    assert models
    for name in models:
        args = container(objects, "Deployment", name, "register")["args"]
        sentinel_url(args[args.index("--redis-url") + 1])
        assert "--record" in args


def test_data_nodes_and_sentinels_are_wired_and_hardened(objects: dict[tuple[str, str], Obj]) -> None:
    master = container(objects, "Deployment", "redis", "redis")["args"]
    replica = container(objects, "Deployment", "redis-replica", "redis")["args"]
    assert "--replicaof" not in master and "--masterauth" in master
    assert replica[replica.index("--replicaof") + 1 :] == ["redis", "6379"]
    assert ("Service", "redis-replica") in objects
    sentinels = objects[("StatefulSet", SENTINEL_NAME)]
    assert sentinels["spec"]["replicas"] == 3
    assert objects[("Service", SENTINEL_NAME)]["spec"]["clusterIP"] == "None"  # pods' DNS names
    script = container(objects, "StatefulSet", SENTINEL_NAME, "sentinel")["command"][-1]
    assert f"sentinel monitor {SERVICE} redis 6379 2" in script and "--sentinel" in script
    for kind, name, which in (
        ("Deployment", "redis-replica", "redis"),
        ("StatefulSet", SENTINEL_NAME, "sentinel"),
    ):
        pod = objects[(kind, name)]["spec"]["template"]["spec"]
        c = container(objects, kind, name, which)
        assert pod["securityContext"]["runAsNonRoot"] and c["securityContext"]["readOnlyRootFilesystem"]
        assert c["readinessProbe"] and c["livenessProbe"] and c["resources"]["limits"]["memory"]
    policies = {n for k, n in objects if k == "NetworkPolicy"}
    assert {"redis-ha", "redis-replica", SENTINEL_NAME, "vllm-egress-sentinel"} <= policies
