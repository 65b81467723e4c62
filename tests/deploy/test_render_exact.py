"""A model with ``kv_index: exact`` renders as the supervisor runs it: each vLLM container publishes its KV
events (``--kv-events-config``, TCP 5557 and replay 5558 on every interface), and the registration sidecar
follows them (``--kv-events`` per replica at an address it reaches: the compose service's name, the pod's
loopback; ``--kv-model`` / ``--kv-chat-template`` from the fleet; the weights mounted read-only). The
renderings pass the compose specification and the strict Kubernetes schemas, the sidecar's own parser
reads its rendered arguments back into the fleet's endpoints, folders and templates, and no other pod
may reach the event ports."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from llmgw_contract.fleet import Model, load_fleet
from llmgw_contract.kv_endpoints import KvEndpoints
from llmgw_contract.sidecar import options_from
from llmgw_contract.sidecar_args import parse_args
from llmgw_tools.deploy.common import MODELS_MOUNT, REPO, slug
from llmgw_tools.deploy.k8s import network_policies
from llmgw_tools.deploy.k8s_model_rbac import token_mount
from tests.deploy.test_k8s import KUBECTL, VERSIONS, admitted
from tests.deploy.test_render import default_fleet, render_to
from workers.replica.weights import weights_for

Obj = dict[str, Any]
SCHEMA = REPO / "deploy" / "schemas" / "compose-spec.json"
EXACT = 0  # the default fleet's first model (SmolLM2, two replicas, a chat template of its own)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Model]:
    fleet = default_fleet()
    fleet["models"][EXACT]["kv_index"] = "exact"
    tmp = tmp_path_factory.mktemp("exact")
    k8s, out = render_to(tmp, fleet)
    return k8s, out, load_fleet(tmp / "fleet.yaml").models[EXACT]


def engine_config(args: list[str]) -> Obj:
    conf = json.loads(args[args.index("--kv-events-config") + 1])
    assert isinstance(conf, dict)
    return conf


def bind_config() -> Obj:
    return {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": "tcp://*:5557",
        "replay_endpoint": "tcp://*:5558",
    }


def test_compose_publishes_events_on_the_service_network_and_the_sidecar_follows_them(
    rendered: tuple[Path, Path, Model],
) -> None:
    _k8s, out, model = rendered
    compose = yaml.safe_load((out / "compose.yaml").read_text())
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    assert [e.message for e in validator.iter_errors(compose)] == []
    services = compose["services"]
    workers = {n: s for n, s in services.items() if n.startswith("vllm-")}
    exact = {n for n in workers if n.startswith(f"vllm-{slug(model.name)}-")}
    assert len(exact) == model.replicas == 2
    for name, s in workers.items():
        if name in exact:
            assert engine_config(s["command"]) == bind_config()
            assert "ports" not in s  # nothing published on the host
        else:
            assert "--kv-events-config" not in s["command"]
    register = services["register"]
    assert register["volumes"] == [workers[min(exact)]["volumes"][0]]
    args = register["command"][3:]  # python -m llmgw_contract.sidecar
    opts = options_from(parse_args([a.replace("$$", "$") for a in args]))
    assert opts.kv_events == {
        f"{model.name}-{i}": KvEndpoints.tcp(f"vllm-{slug(model.name)}-{i}") for i in range(model.replicas)
    }
    assert opts.model_dirs == {model.name: Path(weights_for(model, MODELS_MOUNT))}
    assert opts.chat_templates == {model.name: model.engine.chat_template}
    assert (REPO / ".cache/models" / opts.model_dirs[model.name].name / "tokenizer.json").is_file()


def test_kubernetes_pod_publishes_on_its_loopback_to_its_sidecar(rendered: tuple[Path, Path, Model]) -> None:
    k8s, _out, model = rendered
    built = subprocess.run(
        [KUBECTL, "kustomize", str(k8s / "models")], capture_output=True, text=True, timeout=60
    )
    assert built.returncode == 0, built.stderr
    objects = [d for d in yaml.safe_load_all(built.stdout) if d]
    for o in objects:
        if not o["apiVersion"].startswith("keda.sh/"):
            for version in VERSIONS:
                kubernetes_validate.validate(o, version, strict=True)
    deployments = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
    for name, d in deployments.items():
        vllm, sidecar = d["spec"]["template"]["spec"]["containers"]
        if name != f"vllm-{slug(model.name)}":
            assert "--kv-events-config" not in vllm["args"] and "--kv-events" not in sidecar["args"]
            assert sidecar["volumeMounts"] == [token_mount()]  # no models volume: its API token only
            continue
        assert engine_config(vllm["args"]) == bind_config()
        models = {"name": "models", "mountPath": "/models", "readOnly": True}
        assert sidecar["volumeMounts"] == [models, token_mount()]
        assert "volumeMounts" not in vllm or token_mount() not in vllm["volumeMounts"]
        assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
        # after -m llmgw_contract.sidecar
        args = [a.replace("$(POD_NAME)", "vllm-x-1") for a in sidecar["args"][2:]]
        opts = options_from(parse_args(args))
        assert opts.kv_events == {"vllm-x-1": KvEndpoints.tcp("127.0.0.1")}
        assert opts.model_dirs == {model.name: Path(weights_for(model, MODELS_MOUNT))}
        assert opts.chat_templates == {model.name: model.engine.chat_template}


def test_no_other_pod_reaches_the_event_ports() -> None:
    policies = network_policies()
    vllm = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": "vllm-m"}
    others = {
        "gateway": {"app.kubernetes.io/name": "llmgw-gateway"},
        "prometheus": {"app.kubernetes.io/name": "prometheus"},
        "another model": {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": "vllm-n"},
    }
    for port in (5557, 5558):
        for name, labels in others.items():
            assert not admitted(policies, vllm, labels, port), f"{name} -> vllm:{port}"
    assert admitted(policies, vllm, others["gateway"], 8000)  # the check has teeth


def test_a_hugging_face_model_finds_its_tokenizer_where_vllm_downloads_it(tmp_path: Path) -> None:
    fleet = default_fleet()
    fleet["models"][EXACT].update(kv_index="exact", source={"hf": "HuggingFaceTB/SmolLM2-135M-Instruct"})
    k8s, out = render_to(tmp_path, fleet)
    register = yaml.safe_load((out / "compose.yaml").read_text())["services"]["register"]
    name = fleet["models"][EXACT]["name"]
    vllm = yaml.safe_load((out / "compose.yaml").read_text())["services"][f"vllm-{slug(name)}-0"]
    assert register["environment"]["HF_HOME"] == vllm["environment"]["HF_HOME"] == "/models/hf"
    args = register["command"]
    assert args[args.index("--kv-model") + 1 :][:2] == [name, "HuggingFaceTB/SmolLM2-135M-Instruct"]
    pod = next(d for d in yaml.safe_load_all((k8s / "models" / f"{slug(name)}.yaml").read_text()) if d)
    sidecar = pod["spec"]["template"]["spec"]["containers"][1]
    assert {"name": "HF_HOME", "value": "/models/hf"} in sidecar["env"]
