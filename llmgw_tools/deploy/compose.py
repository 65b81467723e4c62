"""compose.yaml for one GPU host, rendered from the fleet file (pure: text in, text out).

The whole file is generated so that it cannot drift from the fleet: Redis, one vLLM service per replica
(GPU reservation, /dev/shm, the prepared model folder, a health check sized for model load; replicas
that share a GPU start one after another), one registration service that publishes them in Redis, the
gateways, nginx (plain and TLS), Prometheus and Grafana provisioned from grafana/.

Secure by default: API keys on with an admin key, Redis with a password (the state Redis never persists;
the key store ``redis-keys`` appends every write to its volume), vLLM with an API key only the gateways
and the registration service hold. The three secrets come from ``.env`` (docs/deployment/index.md);
compose refuses to start without them. vLLM publishes no port: only the services of this project reach it.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmgw_contract.fleet import Fleet
from llmgw_contract.kv_endpoints import KvEndpoints
from llmgw_contract.registry import RegistryTiming
from llmgw_tools.deploy.common import (
    ALERTMANAGER_PORT,
    DEPLOY_TIMING,
    GATEWAY_PORT,
    HEALTH_SCRIPT,
    HF_HOME,
    NGINX_TEMPLATE,
    PROMETHEUS_TEMPLATE,
    REGISTER_METRICS_PORT,
    VLLM_PORT,
    GpuSizing,
    alerting_conf,
    budget_label,
    container_launch,
    exact,
    header,
    kv_feed_args,
    slug,
    to_yaml,
)
from llmgw_tools.deploy.compose_services import (
    COMPOSE_CONFIG_DIR,
    HEALTHY,
    alertmanager,
    grafana,
    healthcheck,
    prometheus,
    wget_check,
)
from llmgw_tools.deploy.nginx import (
    CONTAINER_TLS_DIR,
    HTTP_PORT,
    HTTPS_PORT,
    START_NGINX,
    container_nginx_conf,
)
from llmgw_tools.deploy.sentinel import render_sentinel_override
from llmgw_tools.stack.redis import EPHEMERAL_REDIS_ARGS, KEYS_REDIS_ARGS
from llmgw_tools.stack.render import prometheus_conf
from workers.replica.launch import ReplicaSpec, plan_replicas

Obj = dict[str, Any]
COMPOSE_FILE = "compose.yaml"
CONFIG_DIR = COMPOSE_CONFIG_DIR
SECRETS = ("LLMGW_REDIS_PASSWORD", "LLMGW_ADMIN_KEY", "LLMGW_VLLM_API_KEY")


def required(name: str) -> str:
    """A secret from .env (or the environment): compose stops with this message when it is not set."""
    return f"${{{name}:?set {name} in .env, see docs/deployment/index.md}}"


def redis_url(host: str) -> str:
    return f"redis://:{required('LLMGW_REDIS_PASSWORD')}@{host}:6379/0"


PROJECT_BUILD = {"context": ".", "dockerfile": "deploy/docker/Dockerfile.gateway"}


@dataclass(frozen=True, slots=True)
class ComposeOptions:
    vllm_image: str = "${VLLM_IMAGE:-vllm/vllm-openai:v0.32.0}"
    # Each image from a variable with the upstream image as default (`make compose-test` sets the local
    # stand-ins: localhost/llmgw-standin-*, docs/deployment/validated-here.md).
    project_image: str = "${LLMGW_IMAGE:-llmgw-gateway:local}"
    redis_image: str = "${REDIS_IMAGE:-redis:7.4-alpine}"
    nginx_image: str = "${NGINX_IMAGE:-nginxinc/nginx-unprivileged:1.27-alpine}"
    prometheus_image: str = "${PROMETHEUS_IMAGE:-prom/prometheus:v3.5.0}"
    grafana_image: str = "${GRAFANA_IMAGE:-grafana/grafana:12.1.0}"
    alertmanager_image: str = "${ALERTMANAGER_IMAGE:-prom/alertmanager:v0.28.1}"
    models_dir: str = "${LLMGW_MODELS_DIR:-./.cache/models}"
    gateways: int = 2
    startup_s: int = 1200
    drain: RegistryTiming = DEPLOY_TIMING
    shared_gpu_fraction: float = 0.9  # split among replicas on one GPU whose model gives no budget
    sizing: GpuSizing = field(default_factory=GpuSizing)  # for budgets left `auto`
    shm_per_gpu_gib: int = 2
    gpus: int | None = None  # the host's GPUs, spread over like the supervisor; None: those the fleet names
    trusted_proxies: tuple[str, ...] = ()  # a load balancer in front of nginx that sets X-Forwarded-For


def literal(text: str) -> str:
    """A string from the fleet, kept as it is: compose would otherwise interpolate `$NAME`."""
    return text.replace("$", "$$")


def python_check(url: str) -> list[str]:
    return ["CMD", "python3", "-c", HEALTH_SCRIPT, url]


def worker_name(spec: ReplicaSpec) -> str:
    return f"vllm-{slug(spec.model.name)}-{spec.index}"


def gpu_ids(spec: ReplicaSpec) -> list[str]:
    return [str(d) for d in spec.devices]


def plan(fleet: Fleet, o: ComposeOptions) -> list[ReplicaSpec]:
    """Every supervised replica with its GPUs (workers.replica.placement) and its memory budget: the model's
    gpu_memory_utilization, the planner's where it is ``auto``, else an equal share of
    ``shared_gpu_fraction`` of each GPU it uses. Replicas without a placement spread over ``o.gpus``
    GPUs (as the supervisor spreads over the GPUs nvidia-smi reports); without it, over as many as the
    fleet names (the highest placed device, or the widest tensor-parallel model)."""
    placed = [d for m in fleet.models for d in m.placement.devices]
    widest = max((m.engine.tensor_parallel_size for m in fleet.models), default=1)
    n_devices = o.gpus or max(1 + max(placed, default=0), widest)
    specs = plan_replicas(fleet.models, fleet.defaults, n_devices)
    planned = o.sizing.fleet_budgets(fleet, n_devices)
    sharing: dict[str, int] = defaultdict(int)
    for s in specs:
        for g in gpu_ids(s):
            sharing[g] += 1
    out = []
    for s in specs:
        most = max(sharing[g] for g in gpu_ids(s))
        budget = (
            s.model.budget.fixed_gpu_memory_utilization
            or math.floor(o.shared_gpu_fraction / most * 100) / 100
        )
        if s.model.budget.auto:
            budget = planned[(s.model.name, s.index)].gpu_memory_utilization
        out.append(ReplicaSpec(s.model, s.index, VLLM_PORT, s.devices, "0.0.0.0", "gpu", budget))
    return out


def worker(spec: ReplicaSpec, after: str | None, o: ComposeOptions) -> Obj:
    launch = container_launch(spec.model, spec.gpu_memory_utilization)
    gpus = gpu_ids(spec)
    service: Obj = {
        "image": o.vllm_image,
        "entrypoint": launch.command,
        "command": [literal(a) for a in launch.args],
        # VLLM_API_KEY is vLLM's --api-key (read from the variable: the key stays out of the command line).
        "environment": {k: literal(v) for k, v in sorted(launch.env.items())}
        | {"VLLM_API_KEY": required("LLMGW_VLLM_API_KEY")},
        "volumes": [f"{o.models_dir}:/models:ro"],
        "shm_size": f"{o.shm_per_gpu_gib * len(gpus)}gb",
        "deploy": {
            "resources": {
                "reservations": {
                    "devices": [{"driver": "nvidia", "device_ids": gpus, "capabilities": ["gpu"]}]
                }
            }
        },
        "healthcheck": healthcheck(
            python_check(f"http://127.0.0.1:{VLLM_PORT}/health"), start_s=o.startup_s, retries=3
        ),
        "stop_grace_period": f"{o.drain.drain_grace_s:g}s",
        "restart": "unless-stopped",
    }
    if after is not None:
        # vLLM mis-sizes the KV cache of instances that start together on one GPU: one after another.
        service["depends_on"] = {after: HEALTHY}
    return service


def record(spec: ReplicaSpec) -> str:
    rec = {
        "id": spec.id,
        "model": spec.model.name,
        "url": f"http://{worker_name(spec)}:{VLLM_PORT}",
        "concurrency": spec.model.concurrency,
        "device": "gpu:" + ",".join(gpu_ids(spec)),
        "budget": budget_label(spec.gpu_memory_utilization),
    }
    return json.dumps(rec, separators=(",", ":"))


def project_service(o: ComposeOptions) -> Obj:
    return {"image": o.project_image, "build": dict(PROJECT_BUILD)}


def kv_args(specs: list[ReplicaSpec]) -> list[str]:
    """The exact models' replicas: each one's KV events on its vLLM service (the compose network), and
    each model's tokenizer folder and chat template, once."""
    args: list[str] = []
    models = {s.model.name: s.model for s in specs if exact(s.model)}
    for s in specs:
        if exact(s.model):
            at = KvEndpoints.tcp(worker_name(s))
            args += ["--kv-events", f"{s.id}={at.events},{at.replay}"]
    for model in models.values():
        args += [literal(a) for a in kv_feed_args(model)]
    return args


def sidecar_service(specs: list[ReplicaSpec], o: ComposeOptions) -> Obj:
    args = ["python", "-m", "llmgw_contract.sidecar"]
    for s in specs:
        args += ["--record", literal(record(s))]
    args += ["--drain-grace", f"{o.drain.drain_grace_s:g}", "--drain-settle", f"{o.drain.drain_settle_s:g}"]
    args += ["--metrics-port", str(REGISTER_METRICS_PORT), *kv_args(specs)]
    feeds = any(exact(s.model) for s in specs)
    return {
        **project_service(o),
        "command": args,
        "environment": {
            "LLMGW_REDIS_URL": redis_url("redis"),
            "VLLM_API_KEY": required("LLMGW_VLLM_API_KEY"),
        }
        | ({"HF_HOME": HF_HOME} if feeds else {}),  # where a repo id's tokenizer is
        "depends_on": {"redis": HEALTHY},
        "healthcheck": healthcheck(python_check(f"http://127.0.0.1:{REGISTER_METRICS_PORT}/metrics")),
        **({"volumes": [f"{o.models_dir}:/models:ro"]} if feeds else {}),
        "read_only": True,
        "stop_grace_period": f"{o.drain.drain_settle_s + o.drain.drain_grace_s + 10:g}s",
        "restart": "unless-stopped",
    }


def gateway(index: int, fleet_path: str, o: ComposeOptions) -> Obj:
    return {
        **project_service(o),
        "command": ["llmgw-gateway", "--host", "0.0.0.0", "--port", str(GATEWAY_PORT)],
        "environment": {
            "LLMGW_FLEET_FILE": "/etc/llmgw/fleet.yaml",
            "LLMGW_REDIS_URL": redis_url("redis"),
            "LLMGW_KEYS_REDIS_URL": redis_url("redis-keys"),
            "LLMGW_GATEWAY_ID": f"gateway-{index}",
            "LLMGW_AUTH": "true",
            "LLMGW_ADMIN_KEY": required("LLMGW_ADMIN_KEY"),
            "LLMGW_VLLM_API_KEY": required("LLMGW_VLLM_API_KEY"),
        },
        "volumes": [f"{fleet_path}:/etc/llmgw/fleet.yaml:ro"],
        "tmpfs": ["/tmp"],
        "read_only": True,
        "depends_on": {"redis": HEALTHY, "redis-keys": HEALTHY},
        "healthcheck": healthcheck(python_check(f"http://127.0.0.1:{GATEWAY_PORT}/health")),
        # uvicorn's graceful shutdown: LLMGW_SHUTDOWN_GRACE_S (120 s) + 10 s for the planned ends, + margin
        "stop_grace_period": "140s",
        "restart": "unless-stopped",
    }


def tls_init(o: ComposeOptions) -> Obj:
    """A self-signed certificate for the TLS listener when none is there yet (replace it for real use)."""
    make = (
        "test -s /tls/tls.crt || { openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=localhost "
        "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout /tls/tls.key -out /tls/tls.crt "
        "&& chown 101:101 /tls/tls.key /tls/tls.crt && chmod 600 /tls/tls.key; }"
    )
    return {
        **project_service(o),
        "user": "0:0",  # writes the fresh volume and hands the files to nginx's user (101)
        "command": ["sh", "-c", make],
        "volumes": ["tls:/tls"],
        "restart": "no",
    }


def nginx(o: ComposeOptions) -> Obj:
    depends: Obj = {f"gateway-{i}": HEALTHY for i in range(1, o.gateways + 1)}
    depends["tls-init"] = {"condition": "service_completed_successfully"}
    return {
        "image": o.nginx_image,
        "entrypoint": ["/bin/sh", "-c"],
        "command": [START_NGINX],
        "volumes": [f"./{CONFIG_DIR}/nginx.conf:/etc/nginx/nginx.conf:ro", f"tls:{CONTAINER_TLS_DIR}:ro"],
        "tmpfs": ["/tmp"],
        "read_only": True,
        # The host side from a variable ([ADDRESS:]PORT), the container's ports fixed.
        "ports": [
            f"${{LLMGW_HTTP_PUBLISH:-{HTTP_PORT}}}:{HTTP_PORT}",
            f"${{LLMGW_HTTPS_PUBLISH:-{HTTPS_PORT}}}:{HTTPS_PORT}",
        ],
        "depends_on": depends,
        "healthcheck": healthcheck(wget_check(f"http://127.0.0.1:{HTTP_PORT}/nginx-health")),
        "restart": "unless-stopped",
    }


def redis(o: ComposeOptions, persistent: bool = False) -> Obj:
    """The state Redis (never persisted), or the key store (every write appended to its volume)."""
    mode = KEYS_REDIS_ARGS if persistent else EPHEMERAL_REDIS_ARGS
    password = required("LLMGW_REDIS_PASSWORD")
    service: Obj = {
        "image": o.redis_image,
        "command": ["redis-server", *mode, "--requirepass", password],
        "environment": {"REDISCLI_AUTH": password},  # redis-cli in the healthcheck authenticates with it
        "healthcheck": healthcheck(["CMD", "redis-cli", "ping"], interval_s=5, start_s=10),
        "restart": "unless-stopped",
    }
    if persistent:
        service["volumes"] = ["redis-keys:/data"]
    return service


def workers(specs: list[ReplicaSpec], o: ComposeOptions) -> Obj:
    last_on: dict[int, str] = {}
    out: Obj = {}
    for s in specs:
        name = worker_name(s)
        out[name] = worker(s, last_on.get(s.device), o)
        for g in gpu_ids(s):
            last_on[int(g)] = name
    return out


def compose(fleet: Fleet, fleet_path: str, o: ComposeOptions) -> Obj:
    specs = plan(fleet, o)
    services: Obj = {"redis": redis(o), "redis-keys": redis(o, persistent=True), "tls-init": tls_init(o)}
    services.update(workers(specs, o))
    if specs:
        services["register"] = sidecar_service(specs, o)
    for i in range(1, o.gateways + 1):
        services[f"gateway-{i}"] = gateway(i, fleet_path, o)
    services.update(
        nginx=nginx(o),
        prometheus=prometheus(o.prometheus_image),
        alertmanager=alertmanager(o.alertmanager_image),
        grafana=grafana(o.grafana_image),
    )
    volumes: Obj = {
        "tls": {}, "redis-keys": {}, "prometheus-data": {}, "alertmanager-data": {}, "grafana-data": {},
    }  # fmt: skip
    return {"name": "llmgw", "services": services, "volumes": volumes}


def worker_targets(specs: list[ReplicaSpec]) -> str:
    """Prometheus file_sd of the vLLM services, in the supervisor's format (workers.life.observe)."""
    groups = [
        {"targets": [f"{worker_name(s)}:{VLLM_PORT}"], "labels": {"model": s.model.name, "replica": s.id}}
        for s in specs
    ]
    return json.dumps(groups, indent=1) + "\n"


def render_compose(
    fleet: Fleet, fleet_path: str = "./fleet.yaml", o: ComposeOptions | None = None
) -> dict[str, str]:
    """compose.yaml and the files it mounts from deploy/compose/, by path relative to the repository."""
    o = o or ComposeOptions()
    gateways = [f"gateway-{i}:{GATEWAY_PORT}" for i in range(1, o.gateways + 1)]
    prom = prometheus_conf(
        PROMETHEUS_TEMPLATE,
        gateways,
        f"register:{REGISTER_METRICS_PORT}",
        Path("/etc/prometheus/workers.json"),
        "/etc/prometheus/rules/*.yml",
        "5s",
    ) + alerting_conf(f"alertmanager:{ALERTMANAGER_PORT}")
    note = "# GENERATED by `llmgw-render compose` from deploy/{}: edit that, then re-render.\n"
    return {
        COMPOSE_FILE: header("The stack on one GPU host: `docker compose up -d`; docs/deployment/compose.md")
        + to_yaml(compose(fleet, fleet_path, o)),
        f"{CONFIG_DIR}/nginx.conf": note.format("nginx/nginx.conf.template")
        + container_nginx_conf(NGINX_TEMPLATE, gateways, trusted_proxies=o.trusted_proxies),
        f"{CONFIG_DIR}/prometheus.yml": note.format("prometheus/prometheus.yml.template") + prom,
        f"{CONFIG_DIR}/workers.json": worker_targets(plan(fleet, o)),
        **render_sentinel_override(
            o.redis_image, required("LLMGW_REDIS_PASSWORD"), o.gateways, bool(plan(fleet, o))
        ),
    }
