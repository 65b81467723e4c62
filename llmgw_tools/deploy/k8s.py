"""Per-model Kubernetes manifests, rendered from the fleet file (pure: text in, text out).

Each model the fleet supervises gets a Deployment (a vLLM container with build_launch's command line, a
registration sidecar, GPUs, /dev/shm, the shared model volume, probes sized for model load and a preStop
drain), a PodDisruptionBudget and a KEDA ScaledObject that scales it on its demand (queued + in flight over
every gateway): by default KEDA's ``external-push`` trigger to ``llmgw-scaler`` (``scaler.yaml``: it pushes
"active" the moment a request waits for a model at zero), or a Prometheus query (``trigger="prometheus"``);
its minimum and maximum come from the model's scaling rule (:mod:`llmgw_contract.scaling`).
Models served elsewhere (``endpoints``) need no manifest: the gateway routes to their URLs.

Secure by default: vLLM runs with an API key and the sidecar reaches Redis with its password, both from
the Secret ``llmgw-secrets`` (keys ``vllm-api-key``, ``redis-password``, ``admin-key``) that the operator
creates; NetworkPolicies (``networkpolicy.yaml``) let only the gateways, Prometheus and a model's own pod
reach vLLM, only the gateways and the sidecars (and a supervisor, should one run here) reach the state
Redis, and only the gateways reach the key store.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from llmgw_contract.drain import drain_argv
from llmgw_contract.fleet import Fleet, Model
from llmgw_contract.kv_endpoints import KvEndpoints
from llmgw_contract.registry import RegistryTiming
from llmgw_contract.scaling import scaling_rule
from llmgw_contract.vllm_probe import API_KEY_ENV
from llmgw_tools.deploy.common import (
    ALERT_RULES,
    ALERTMANAGER_CONF,
    DEPLOY_TIMING,
    HF_HOME,
    NGINX_TEMPLATE,
    REGISTER_METRICS_PORT,
    VLLM_PORT,
    GpuSizing,
    budget_label,
    container_launch,
    exact,
    header,
    kv_feed_args,
    slug,
    to_yaml,
    to_yaml_docs,
)
from llmgw_tools.deploy.k8s_model_rbac import MODEL_ACCOUNT, model_rbac, token_mount, token_volume
from llmgw_tools.deploy.nginx import container_nginx_conf

Obj = dict[str, Any]
MODELS_DIR = "models"
FLEET_FILE = "fleet.yaml"


@dataclass(frozen=True, slots=True)
class K8sOptions:
    """What the fleet file does not say about a cluster; every number is a default to tune."""

    namespace: str = "llmgw"
    vllm_image: str = "vllm"  # mapped to a real image by `images:` in deploy/k8s/kustomization.yaml
    project_image: str = "llmgw-gateway"
    # $(REDIS_PASSWORD) is expanded by the kubelet from the container's env (the Secret).
    redis_url: str = "redis://:$(REDIS_PASSWORD)@redis:6379/0"
    secret: str = "llmgw-secrets"
    models_claim: str = "llmgw-models"
    startup_s: int = 1200  # weights from the shared volume, CUDA graphs, KV-cache profiling
    drain: RegistryTiming = DEPLOY_TIMING  # in-flight generations may finish within drain.drain_grace_s
    sizing: GpuSizing = field(default_factory=GpuSizing)  # for budgets left `auto`
    shutdown_s: int = 30  # vLLM's own exit after SIGTERM
    scale_factor: int = 4  # a model without a scaling rule: maxReplicaCount = replicas × this (at most 64)
    trigger: Literal["external-push", "prometheus"] = "external-push"
    scaler_port: int = 9090
    cpu_per_gpu: int = 4
    memory_per_gpu_gib: int = 24
    shm_per_gpu_gib: int = 2
    trusted_proxies: tuple[str, ...] = ()  # a load balancer in front of nginx that sets X-Forwarded-For
    prometheus_server: str = ""  # the Prometheus trigger's server; "" = the base's own (prometheus_url)

    @property
    def prometheus_url(self) -> str:
        """What KEDA's Prometheus trigger queries: ``prometheus_server``, else the namespace's Prometheus."""
        return self.prometheus_server or f"http://prometheus.{self.namespace}.svc:9090"

    @property
    def scaler_address(self) -> str:
        """llmgw-scaler's Service, as KEDA's operator (in its own namespace) reaches it."""
        return f"llmgw-scaler.{self.namespace}.svc:{self.scaler_port}"

    @property
    def termination_grace_s(self) -> int:
        return math.ceil(self.drain.drain_settle_s + self.drain.drain_grace_s) + self.shutdown_s


def workload_name(model: Model) -> str:
    return f"vllm-{slug(model.name)}"


def labels(model: Model) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": workload_name(model),
        "app.kubernetes.io/component": "model-server",
        "llmgw.io/model": slug(model.name),
    }


def selector(model: Model) -> dict[str, str]:
    return {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": workload_name(model)}


def metadata(model: Model) -> Obj:
    return {
        "name": workload_name(model),
        "labels": labels(model),
        "annotations": {"llmgw.io/model": model.name},
    }


def secret_env(name: str, key: str, o: K8sOptions) -> Obj:
    """An env variable read from a key of the stack's Secret."""
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": o.secret, "key": key}}}


def http_probe(path: str, port: str, period_s: int, failures: int, timeout_s: int = 5) -> Obj:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period_s,
        "timeoutSeconds": timeout_s,
        "failureThreshold": failures,
    }


def vllm_container(model: Model, o: K8sOptions) -> Obj:
    launch = container_launch(model, o.sizing.solo_budget(model))
    gpus = model.engine.tensor_parallel_size
    memory = f"{o.memory_per_gpu_gib * gpus}Gi"
    drain = drain_argv("python3", f"http://127.0.0.1:{VLLM_PORT}", o.drain)
    return {
        "name": "vllm",
        "image": o.vllm_image,
        "imagePullPolicy": "IfNotPresent",
        "command": launch.command,
        "args": launch.args,
        # VLLM_API_KEY is vLLM's --api-key (read from the variable: the key stays out of the command line).
        "env": [{"name": k, "value": v} for k, v in sorted(launch.env.items())]
        + [secret_env(API_KEY_ENV, "vllm-api-key", o)],
        "ports": [{"name": "http", "containerPort": VLLM_PORT, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": str(o.cpu_per_gpu * gpus), "memory": memory, "nvidia.com/gpu": str(gpus)},
            "limits": {"memory": f"{o.memory_per_gpu_gib * gpus * 2}Gi", "nvidia.com/gpu": str(gpus)},
        },
        # Model load: the process is alive long before /health answers; liveness starts only after this.
        "startupProbe": http_probe("/health", "http", 10, math.ceil(o.startup_s / 10)),
        "readinessProbe": http_probe("/health", "http", 10, 3),
        "livenessProbe": http_probe("/health", "http", 15, 4, timeout_s=10),
        "lifecycle": {"preStop": {"exec": {"command": drain}}},
        # The vLLM image runs as root (caches under /root/.cache, GPU device files): no runAsNonRoot here,
        # but no privilege escalation and no capabilities. tests/deploy/test_k8s.py lists this exception.
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "models", "mountPath": "/models", "readOnly": True},
        ],
    }


def record_json(model: Model, o: K8sOptions) -> str:
    """The ReplicaRecord the sidecar publishes; $(POD_NAME) and $(POD_IP) are expanded by the kubelet."""
    gpus = model.engine.tensor_parallel_size
    record = {
        "id": "$(POD_NAME)",
        "model": model.name,
        "url": f"http://$(POD_IP):{VLLM_PORT}",
        "concurrency": model.concurrency,
        "device": "gpu:" + ",".join(str(i) for i in range(gpus)),
        "budget": budget_label(o.sizing.solo_budget(model)),
    }
    return json.dumps(record, separators=(",", ":"))


KV_SIDECAR = KvEndpoints.tcp("127.0.0.1")
"""Where the sidecar reads its pod's KV events: the pod's loopback (the vLLM container binds every
interface; the ``vllm`` NetworkPolicy admits no other pod to those ports)."""


def kv_sidecar(model: Model) -> tuple[list[str], Obj]:
    """An exact model's sidecar: its flags (the pod's KV events, the tokenizer folder, the template) and
    what more it needs (the models volume; memory for the mirror of the cache and the tokenizer)."""
    if not exact(model):
        return [], {}
    args = ["--kv-events", f"$(POD_NAME)={KV_SIDECAR.events},{KV_SIDECAR.replay}", *kv_feed_args(model)]
    more = {
        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True}],
    }
    return args, more


def sidecar_container(model: Model, o: K8sOptions) -> Obj:
    kv_args, kv_more = kv_sidecar(model)
    args = [
        "-m", "llmgw_contract.sidecar",
        "--record", record_json(model, o),
        "--redis-url", o.redis_url,
        "--drain-grace", f"{o.drain.drain_grace_s:g}",
        "--drain-settle", f"{o.drain.drain_settle_s:g}",
        "--metrics-port", str(REGISTER_METRICS_PORT),
        *kv_args,
    ]  # fmt: skip
    field = {"POD_NAME": "metadata.name", "POD_IP": "status.podIP"}
    mounts = [*kv_more.pop("volumeMounts", []), token_mount()]  # the API token: its deletion cost
    return {
        "name": "register",
        "image": o.project_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python"],
        "args": args,
        "env": [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in field.items()]
        + [secret_env("REDIS_PASSWORD", "redis-password", o), secret_env(API_KEY_ENV, "vllm-api-key", o)]
        + ([{"name": "HF_HOME", "value": HF_HOME}] if exact(model) else []),  # a repo id's tokenizer
        "ports": [{"name": "metrics", "containerPort": REGISTER_METRICS_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "192Mi"}},
        "readinessProbe": http_probe("/metrics", "metrics", 10, 3),
        "livenessProbe": http_probe("/metrics", "metrics", 20, 3),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "runAsGroup": 10001,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        **kv_more,
        "volumeMounts": mounts,
    }


def deployment(model: Model, o: K8sOptions) -> Obj:
    gpus = model.engine.tensor_parallel_size
    shm = {"medium": "Memory", "sizeLimit": f"{o.shm_per_gpu_gib * gpus}Gi"}
    pod = {
        "terminationGracePeriodSeconds": o.termination_grace_s,
        "serviceAccountName": MODEL_ACCOUNT,
        # the sidecar alone mounts it (llmgw_tools/deploy/k8s_model_rbac.py)
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [vllm_container(model, o), sidecar_container(model, o)],
        "volumes": [
            {"name": "shm", "emptyDir": shm},
            {"name": "models", "persistentVolumeClaim": {"claimName": o.models_claim, "readOnly": True}},
            token_volume(),
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(model),
        "spec": {
            "replicas": model.replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector(model)},
            # A new pod must be ready before an old one drains: no capacity is lost during a rollout.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels(model), "annotations": {"llmgw.io/model": model.name}},
                "spec": pod,
            },
        },
    }


def disruption_budget(model: Model) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(model),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(model)}},
    }


def demand_query(model: Model) -> str:
    """Requests the model's replicas hold plus those queued for it, over every gateway replica."""
    m = json.dumps(model.name)
    inflight = f"sum(llmgw_inflight_requests{{model={m}}}) or vector(0)"
    queued = f"max(llmgw_queue_depth{{model={m}}}) or vector(0)"
    return f"({inflight}) + ({queued})"


def demand_trigger(model: Model, o: K8sOptions) -> Obj:
    """The ScaledObject's trigger: llmgw-scaler's push (the default) or the Prometheus query."""
    if o.trigger == "external-push":
        meta = {"scalerAddress": o.scaler_address, "model": model.name}
        return {"type": "external-push", "name": "demand", "metadata": meta}
    return {
        "type": "prometheus",
        "name": "queue-depth",
        "metadata": {
            "serverAddress": o.prometheus_url,
            "query": demand_query(model),
            # One replica's worth of requests per replica: a queue adds replicas, an idle fleet sheds them.
            "threshold": str(scaling_rule(model).target_per_replica),
            "activationThreshold": "0",
        },
    }


def replica_bounds(model: Model, o: K8sOptions) -> tuple[int, int]:
    """(minReplicaCount, maxReplicaCount): the scaling rule's; without one, ``replicas`` up to
    ``replicas × scale_factor`` (what the cluster did before rules existed)."""
    rule = scaling_rule(model)
    if model.scaling is None:
        return rule.min_replicas, min(64, max(1, model.replicas) * o.scale_factor)
    return rule.min_replicas, rule.max_replicas


def scaled_object(model: Model, o: K8sOptions) -> Obj:
    pods = {"type": "Pods", "value": 1}
    delay = math.ceil(scaling_rule(model).scale_down_delay_s)
    behavior = {
        "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [{**pods, "periodSeconds": 60}]},
        "scaleDown": {"stabilizationWindowSeconds": delay, "policies": [{**pods, "periodSeconds": 300}]},
    }
    low, high = replica_bounds(model, o)
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata(model),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": workload_name(model)},
            "minReplicaCount": low,
            "maxReplicaCount": high,
            "pollingInterval": 15,
            "cooldownPeriod": delay,  # the last replica's delay before zero (minReplicaCount 0 only)
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}},
            "triggers": [demand_trigger(model, o)],
        },
    }


def model_manifests(model: Model, o: K8sOptions) -> list[Obj]:
    return [deployment(model, o), disruption_budget(model), scaled_object(model, o)]


def check_names(fleet: Fleet) -> None:
    seen: dict[str, str] = {}
    for m in fleet.models:
        name = workload_name(m)
        if name in seen:
            raise ValueError(f"models {seen[name]!r} and {m.name!r} both render to {name!r}")
        seen[name] = m.name


def models_kustomization(files: list[str]) -> Obj:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": files,
        # The gateways read the same fleet file (a copy here: kustomize reads only below deploy/k8s).
        "configMapGenerator": [{"name": "llmgw-fleet", "files": [FLEET_FILE]}],
    }


GATEWAY_PODS = {"app.kubernetes.io/name": "llmgw-gateway"}
PROMETHEUS_PODS = {"app.kubernetes.io/name": "prometheus"}
MODEL_PODS = {"app.kubernetes.io/name": "vllm"}
SUPERVISOR_PODS = {"app.kubernetes.io/name": "llmgw-workers"}
SCALER_PODS = {"app.kubernetes.io/name": "llmgw-scaler"}
STATE_REDIS_PODS = {"app.kubernetes.io/name": "redis"}
KEY_STORE_PODS = {"app.kubernetes.io/name": "redis-keys"}
REDIS_PORT = 6379


def ingress_policy(name: str, pods: dict[str, str], sources: list[dict[str, str]], ports: list[int]) -> Obj:
    """Only pods with one of ``sources``' labels (same namespace) may open ``ports`` of ``pods``."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": {
            "podSelector": {"matchLabels": pods},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": src}} for src in sources],
                    "ports": [{"protocol": "TCP", "port": p} for p in ports],
                }
            ],
        },
    }


def vllm_egress_policy() -> Obj:
    """vLLM pods open connections to DNS and the state Redis (their registration sidecar) only: weights
    come from the shared volume (offline), so no request (a media URL) can make a worker fetch anything."""
    dns = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "vllm-egress"},
        "spec": {
            "podSelector": {"matchLabels": MODEL_PODS},
            "policyTypes": ["Egress"],
            "egress": [
                {"to": [dns], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                {
                    "to": [{"podSelector": {"matchLabels": STATE_REDIS_PODS}}],
                    "ports": [{"protocol": "TCP", "port": REDIS_PORT}],
                },
            ],
        },
    }


def network_policies() -> list[Obj]:
    """vLLM: the gateways and Prometheus (its own sidecar talks over the pod's loopback, which no policy
    filters), and out to DNS and the state Redis only; the state Redis: gateways, sidecars, a supervisor;
    the key store: the gateways only."""
    vllm_ports = [VLLM_PORT, REGISTER_METRICS_PORT]
    state_clients = [GATEWAY_PODS, MODEL_PODS, SUPERVISOR_PODS, SCALER_PODS]
    return [
        ingress_policy("vllm", MODEL_PODS, [GATEWAY_PODS, PROMETHEUS_PODS], vllm_ports),
        ingress_policy("redis", STATE_REDIS_PODS, state_clients, [REDIS_PORT]),
        ingress_policy("redis-keys", KEY_STORE_PODS, [GATEWAY_PODS], [REDIS_PORT]),
        vllm_egress_policy(),
    ]


def render_k8s(fleet: Fleet, fleet_text: str, o: K8sOptions | None = None) -> dict[str, str]:
    """Every generated file under deploy/k8s, by path relative to it."""
    o = o or K8sOptions()
    check_names(fleet)
    out: dict[str, str] = {}
    for m in fleet.models:
        if not m.managed:
            continue
        what = f"model {m.name}: Deployment, PodDisruptionBudget, KEDA ScaledObject"
        out[f"{MODELS_DIR}/{slug(m.name)}.yaml"] = header(what) + to_yaml_docs(model_manifests(m, o))
    what = "the model pods' ServiceAccount and Role: the sidecar keeps the pod's deletion cost"
    out[f"{MODELS_DIR}/rbac.yaml"] = header(what) + to_yaml_docs(model_rbac())
    files = [p.split("/", 1)[1] for p in out]
    out[f"{MODELS_DIR}/kustomization.yaml"] = header("the models of the fleet") + to_yaml(
        models_kustomization(files)
    )
    out[f"{MODELS_DIR}/{FLEET_FILE}"] = fleet_text
    nginx = container_nginx_conf(NGINX_TEMPLATE, ["gateway:9000"], trusted_proxies=o.trusted_proxies)
    out["nginx/nginx.conf"] = "# GENERATED by `llmgw-render` from deploy/nginx/nginx.conf.template.\n" + nginx
    what = "NetworkPolicies: who may reach vLLM, the state Redis and the key store"
    out["networkpolicy.yaml"] = header(what) + to_yaml_docs(network_policies())
    rules = "# GENERATED by `llmgw-render`: a copy of deploy/prometheus/rules/llmgw.yml.\n"
    out["prometheus/llmgw-rules.yml"] = rules + ALERT_RULES.read_text()
    conf = "# GENERATED by `llmgw-render`: a copy of deploy/alertmanager/alertmanager.yml.\n"
    out["alertmanager/alertmanager.yml"] = conf + ALERTMANAGER_CONF.read_text()
    return out
