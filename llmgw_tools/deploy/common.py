"""What the Kubernetes and compose renderers share: names, the vLLM container command, YAML output."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llmgw_contract.fleet import Defaults, Fleet, Model, Placement
from llmgw_contract.kv_endpoints import KvEndpoints
from llmgw_contract.registry import RegistryTiming
from workers.planner import make_config_loader
from workers.planner.budgets import PlannedBudgets, needs_plan, planned_budgets
from workers.planner.cli import H200_BYTES
from workers.replica.launch import ReplicaSpec, build_launch
from workers.replica.weights import weights_for

REPO = Path(__file__).resolve().parents[2]
NGINX_TEMPLATE = REPO / "deploy" / "nginx" / "nginx.conf.template"
PROMETHEUS_TEMPLATE = REPO / "deploy" / "prometheus" / "prometheus.yml.template"
ALERT_RULES = REPO / "deploy" / "prometheus" / "rules" / "llmgw.yml"
ALERTMANAGER_CONF = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
ALERTMANAGER_PORT = 9093

VLLM_PORT = 8000
GATEWAY_PORT = 9000
REGISTER_METRICS_PORT = 9400
MODELS_MOUNT = Path("/models")
HF_HOME = "/models/hf"
# Variables of build_launch that make no sense in a container: the device plugin (Kubernetes) or the
# device reservation (compose) already decides which GPUs the container sees, as indices from 0.
HOST_ONLY_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "VLLM_CPU_OMP_THREADS_BIND"})

# Deployments let in-flight generations run longer than the embedded stack (30 s): streams of minutes.
DEPLOY_TIMING = RegistryTiming(drain_grace_s=120.0)

HEALTH_SCRIPT = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)"


@dataclass(frozen=True, slots=True)
class ContainerLaunch:
    """The vLLM container of one replica: entrypoint, arguments and environment."""

    command: list[str]
    args: list[str]
    env: dict[str, str]


def slug(name: str, limit: int = 40) -> str:
    """A DNS-1123 label for a model name; a short hash keeps names that had to change apart."""
    s = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if s == name and len(s) <= limit:
        return s
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{s[: limit - 7].rstrip('-')}-{digest}"


@dataclass(frozen=True, slots=True)
class GpuSizing:
    """What rendering needs to plan budgets left ``auto``: each GPU's size, where config.json files are."""

    gpu_bytes: int = H200_BYTES
    models_dir: Path = Path(".cache/models")

    def fleet_budgets(self, fleet: Fleet, n_devices: int) -> PlannedBudgets:
        """The planner's plans for the fleet on ``n_devices`` GPUs of this size ({} if none is auto)."""
        if not needs_plan(fleet):
            return {}
        devices = dict.fromkeys(range(n_devices), self.gpu_bytes)
        return planned_budgets(fleet, devices, make_config_loader(self.models_dir))

    def solo_budget(self, model: Model) -> float | None:
        """One replica alone on its own GPUs (a Kubernetes pod): the fleet's fraction, or the planner's."""
        if not model.budget.auto:
            return model.budget.fixed_gpu_memory_utilization
        tp = model.engine.tensor_parallel_size
        alone = model.model_copy(update={"replicas": 1, "placement": Placement(devices=list(range(tp)))})
        planned = self.fleet_budgets(Fleet(defaults=Defaults(device="gpu"), models=[alone]), tp)
        return planned[(model.name, 0)].gpu_memory_utilization


def container_launch(model: Model, gpu_memory_utilization: float | None) -> ContainerLaunch:
    """build_launch's command line for one GPU replica in a container listening on all interfaces (a
    model with no media-domain allow-list gets build_launch's deny-all, ``NO_MEDIA_DOMAIN``)."""
    devices = tuple(range(model.engine.tensor_parallel_size))
    spec = ReplicaSpec(model, 0, VLLM_PORT, devices, "0.0.0.0", "gpu", gpu_memory_utilization)
    # No sleep mode in a container: the orchestrator scales an on-demand model to zero (KEDA) and no
    # agent there calls /sleep or /wake_up, so the dev-mode server that serves them stays off.
    weights = weights_for(model, MODELS_MOUNT)
    launch = build_launch(spec, weights, python="python3", sleep_mode=False, kv_events=KV_BIND)
    env = {k: v for k, v in launch.env.items() if k not in HOST_ONLY_ENV}
    env["HF_HOME"] = HF_HOME
    return ContainerLaunch(launch.argv[:3], launch.argv[3:], env)


KV_BIND = KvEndpoints.tcp("*")
"""Where a container's vLLM publishes its KV events (a model whose ``kv_index`` is exact): every
interface, ports 5557 and 5558; its registration sidecar connects (same pod, or the compose network)."""


def exact(model: Model) -> bool:
    return model.kv_index == "exact"


def kv_feed_args(model: Model) -> list[str]:
    """The registration sidecar's flags that let it turn an exact model's KV events into prefix keys: the
    model's tokenizer folder as the containers mount it, and the fleet's chat template (vLLM's)."""
    args = ["--kv-model", model.name, str(weights_for(model, MODELS_MOUNT))]
    if model.engine.chat_template:
        args += ["--kv-chat-template", model.name, model.engine.chat_template]
    return args


def budget_label(gpu_memory_utilization: float | None) -> str:
    value = "vllm-default" if gpu_memory_utilization is None else f"{gpu_memory_utilization:.3f}"
    return f"gpu_memory_utilization={value}"


class _Dumper(yaml.SafeDumper):
    """safe_dump without anchors and aliases: rendered files must read plainly."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(data: Any) -> str:
    out: str = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096)
    return out


def to_yaml_docs(docs: list[dict[str, Any]]) -> str:
    return "---\n".join(to_yaml(d) for d in docs)


def header(what: str) -> str:
    return (
        f"# {what}\n# GENERATED by `llmgw-render` from the fleet file: edit the fleet "
        "(or llmgw_tools/deploy/), then re-render.\n"
    )


def alerting_conf(target: str) -> str:
    """Prometheus' ``alerting:`` section: every alert, firing and resolved, to the Alertmanager at
    ``target`` (host:port)."""
    return f'alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ["{target}"]\n'
