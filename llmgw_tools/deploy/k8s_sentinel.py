"""A kustomize overlay of deploy/k8s with the state Redis as a Sentinel setup (pure: fleet in, text out).

``kubectl apply -k deploy/k8s-redis-sentinel`` is the base plus: the base ``redis`` (its Service the
master's stable name) and a ``redis-replica`` Deployment and Service, each announcing its Service name;
three Sentinels (StatefulSet ``redis-sentinel``, quorum 2, each announcing its pod's DNS name, the
configuration written at start into an emptyDir, as Sentinel rewrites it); the gateways' and the model
sidecars' Redis URL as ``redis+sentinel://…/llmgw`` (llmgw_contract/redis_url.py); NetworkPolicies that
add the Sentinel port and the replication links. The Sentinels' configuration is
llmgw_tools/deploy/sentinel.py's, the one the compose override renders. The key store stays one
persisted server.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llmgw_contract.fleet import Fleet
from llmgw_tools.deploy.common import header, to_yaml, to_yaml_docs
from llmgw_tools.deploy.k8s import (
    GATEWAY_PODS,
    MODEL_PODS,
    REDIS_PORT,
    SCALER_PODS,
    STATE_REDIS_PODS,
    SUPERVISOR_PODS,
    K8sOptions,
    ingress_policy,
    secret_env,
    sidecar_container,
    workload_name,
)
from llmgw_tools.deploy.sentinel import SENTINEL_PORT, sentinel_conf, sentinel_script, sentinel_url
from llmgw_tools.stack.redis import EPHEMERAL_REDIS_ARGS

Obj = dict[str, Any]
OVERLAY_DIR = "../k8s-redis-sentinel"  # beside the base: kustomize refuses an overlay inside it
PASSWORD = "$(REDIS_PASSWORD)"  # expanded by the kubelet from the container's env (the Secret)
SENTINEL_NAME = "redis-sentinel"
SENTINEL_HOSTS = tuple(f"{SENTINEL_NAME}-{i}.{SENTINEL_NAME}" for i in range(3))
REPLICA_PODS = {"app.kubernetes.io/name": "redis-replica"}
SENTINEL_PODS = {"app.kubernetes.io/name": SENTINEL_NAME}
REDIS_IMAGE = "redis:7.4-alpine"
HARDENED = {
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
POD_SECURITY = {
    "runAsNonRoot": True, "runAsUser": 999, "runAsGroup": 1000, "fsGroup": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}  # fmt: skip


def url() -> str:
    return sentinel_url(PASSWORD, SENTINEL_HOSTS)


def data_args(name: str, replica_of: str | None) -> list[str]:
    argv = ["redis-server", *EPHEMERAL_REDIS_ARGS, "--maxmemory-policy", "noeviction"]
    argv += ["--requirepass", PASSWORD, "--masterauth", PASSWORD, "--replica-announce-ip", name]
    return argv + (["--replicaof", replica_of, str(REDIS_PORT)] if replica_of else [])


def cli_probe(port: int, period_s: int) -> Obj:
    return {"exec": {"command": ["redis-cli", "-p", str(port), "ping"]}, "periodSeconds": period_s}


def redis_container(name: str, args: list[str], port: int, o: K8sOptions) -> Obj:
    return {
        "name": name,
        "image": REDIS_IMAGE,
        "args": args,
        "env": [
            secret_env("REDIS_PASSWORD", "redis-password", o),
            secret_env("REDISCLI_AUTH", "redis-password", o),
        ],
        "ports": [{"name": "redis", "containerPort": port}],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}},
        "readinessProbe": cli_probe(port, 5),
        "livenessProbe": {**cli_probe(port, 10), "timeoutSeconds": 5, "failureThreshold": 3},
        "securityContext": HARDENED,
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }


def pod(labels: dict[str, str], container: Obj) -> Obj:
    spec = {"enableServiceLinks": False, "securityContext": POD_SECURITY, "containers": [container]}
    return {"metadata": {"labels": labels}, "spec": {**spec, "volumes": [{"name": "data", "emptyDir": {}}]}}


def service(name: str, labels: dict[str, str], port: int, headless: bool = False) -> Obj:
    spec: Obj = {"selector": labels, "ports": [{"name": "redis", "port": port, "targetPort": port}]}
    if headless:
        spec.update(clusterIP="None", publishNotReadyAddresses=True)
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels}, "spec": spec}


def workload(kind: str, name: str, labels: dict[str, str], container: Obj, **spec: Any) -> Obj:
    body = {**spec, "selector": {"matchLabels": labels}, "template": pod(labels, container)}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "labels": labels}, "spec": body}


def replica(o: K8sOptions) -> list[Obj]:
    name = "redis-replica"
    container = redis_container("redis", data_args(name, "redis"), REDIS_PORT, o)
    deployment = workload(
        "Deployment", name, REPLICA_PODS, container, replicas=1, strategy={"type": "Recreate"}
    )
    return [deployment, service(name, REPLICA_PODS, REDIS_PORT)]


def sentinels(o: K8sOptions) -> list[Obj]:
    script = sentinel_script(sentinel_conf(f"$(POD_NAME).{SENTINEL_NAME}", "redis", PASSWORD))
    container = redis_container("sentinel", [], SENTINEL_PORT, o)
    del container["args"]
    container.update(
        command=["sh", "-c", script], ports=[{"name": "sentinel", "containerPort": SENTINEL_PORT}]
    )
    container["env"] = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    container["env"] += [secret_env(n, "redis-password", o) for n in ("REDIS_PASSWORD", "REDISCLI_AUTH")]
    stateful = workload(
        "StatefulSet", SENTINEL_NAME, SENTINEL_PODS, container,
        replicas=3, serviceName=SENTINEL_NAME, podManagementPolicy="Parallel",
    )  # fmt: skip
    return [stateful, service(SENTINEL_NAME, SENTINEL_PODS, SENTINEL_PORT, headless=True)]


def egress_to(pods: dict[str, str], port: int) -> Obj:
    return {"to": [{"podSelector": {"matchLabels": pods}}], "ports": [{"protocol": "TCP", "port": port}]}


def policies() -> list[Obj]:
    """Additions to the base's policies (they add up): the data nodes and the Sentinels reach each other,
    the state Redis' clients reach the replica and the Sentinels, the model pods may open both."""
    clients = [GATEWAY_PODS, MODEL_PODS, SUPERVISOR_PODS, SCALER_PODS]
    data = [STATE_REDIS_PODS, REPLICA_PODS, SENTINEL_PODS]
    egress = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "vllm-egress-sentinel"},
        "spec": {
            "podSelector": {"matchLabels": MODEL_PODS},
            "policyTypes": ["Egress"],
            "egress": [egress_to(REPLICA_PODS, REDIS_PORT), egress_to(SENTINEL_PODS, SENTINEL_PORT)],
        },
    }
    return [
        ingress_policy("redis-ha", STATE_REDIS_PODS, clients + data, [REDIS_PORT]),
        ingress_policy("redis-replica", REPLICA_PODS, clients + data, [REDIS_PORT]),
        ingress_policy(SENTINEL_NAME, SENTINEL_PODS, [*clients, SENTINEL_PODS], [SENTINEL_PORT]),
        egress,
    ]


def patches(fleet: Fleet, o: K8sOptions) -> list[Obj]:
    """Strategic-merge patches: the master's flags, the gateways' and the scaler's URL, each model
    sidecar's arguments."""
    ha = replace(o, redis_url=url())
    master = redis_container("redis", data_args("redis", None), REDIS_PORT, o)
    password = secret_env("REDIS_PASSWORD", "redis-password", o)  # listed first: the URL expands it
    out = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "redis"},
         "spec": {"template": {"spec": {"containers": [{"name": "redis", "args": master["args"]}]}}}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "gateway"},
         "spec": {"template": {"spec": {"containers": [
             {"name": "gateway", "env": [password, {"name": "LLMGW_REDIS_URL", "value": url()}]}]}}}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "llmgw-scaler"},
         "spec": {"template": {"spec": {"containers": [
             {"name": "scaler", "env": [password, {"name": "LLMGW_REDIS_URL", "value": url()}]}]}}}},
    ]  # fmt: skip
    for m in fleet.models:
        if m.managed:
            sidecar = {"name": "register", "args": sidecar_container(m, ha)["args"]}
            spec = {"template": {"spec": {"containers": [sidecar]}}}
            out.append(
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": workload_name(m)},
                    "spec": spec,
                }
            )
    return out


def render_sentinel_overlay(fleet: Fleet, o: K8sOptions) -> dict[str, str]:
    """The overlay's files, by path relative to deploy/k8s (the overlay is its sibling)."""
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../k8s", "redis-sentinel.yaml"],
        "patches": [{"path": "patches.yaml"}],
    }
    what = (
        "the state Redis as master + replica + three Sentinels: `kubectl apply -k deploy/k8s-redis-sentinel`"
    )
    return {
        f"{OVERLAY_DIR}/kustomization.yaml": header(what) + to_yaml(kustomization),
        f"{OVERLAY_DIR}/redis-sentinel.yaml": header("the replica, the Sentinels, their NetworkPolicies")
        + to_yaml_docs([*replica(o), *sentinels(o), *policies()]),
        f"{OVERLAY_DIR}/patches.yaml": header("the master's flags and every client's Redis URL")
        + to_yaml_docs(patches(fleet, o)),
    }
