"""testing/kube_adapt.py: each step that adapts the rendered Kubernetes objects to `podman kube play`,
on the objects `kubectl kustomize deploy/k8s` renders (offline, no podman)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from testing import kube_adapt as ka
from testing.procs import REPO

KUBECTL = str(Path(sys.executable).parent / "kubectl")
SECRETS = {"llmgw-secrets": {"redis-password": "pw", "admin-key": "adm", "vllm-api-key": "vk"}}
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def objects() -> list[Obj]:
    return ka.rendered_objects(KUBECTL, REPO / "deploy/k8s")


def workload(objects: list[Obj], name: str) -> Obj:
    (obj,) = [o for o in ka.select_workloads(objects, [name]) if o["kind"] != "ConfigMap"]
    return obj


def env_of(obj: Obj, container: str) -> dict[str, Any]:
    (c,) = [c for c in ka.containers(obj) if c["name"] == container]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def test_select_workloads_keeps_the_configmaps_and_refuses_unknown_names(objects: list[Obj]) -> None:
    chosen = ka.select_workloads(objects, ["gateway"])
    assert sorted(o["kind"] for o in chosen) == ["ConfigMap"] * 4 + ["Deployment"]
    with pytest.raises(KeyError, match="no-such"):
        ka.select_workloads(objects, ["no-such"])


def test_statefulset_becomes_a_deployment_with_an_emptydir(objects: list[Obj]) -> None:
    keys = ka.statefulset_as_deployment(workload(objects, "redis-keys"))
    assert keys["kind"] == "Deployment" and "volumeClaimTemplates" not in keys["spec"]
    assert {"name": "data", "emptyDir": {}} in keys["spec"]["template"]["spec"]["volumes"]
    gateway = workload(objects, "gateway")
    assert ka.statefulset_as_deployment(gateway) is gateway


def test_secret_and_field_refs_become_values(objects: list[Obj]) -> None:
    model = workload(objects, "vllm-all-minilm-l6-v2")
    fields = {"metadata.name": "p", "status.podIP": "10.0.0.4"}
    out = ka.inline_field_refs(ka.inline_secrets(model, SECRETS), fields)
    register = env_of(out, "register")
    assert register == {"POD_NAME": "p", "POD_IP": "10.0.0.4", "REDIS_PASSWORD": "pw", "VLLM_API_KEY": "vk"}
    assert env_of(out, "vllm")["VLLM_API_KEY"] == "vk"
    assert env_of(model, "register")["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}  # not mutated
    with pytest.raises(KeyError):
        ka.inline_secrets(model, {"llmgw-secrets": {}})


def test_expand_follows_the_kubelet() -> None:
    env = {"A": "x", "B": "y"}
    assert ka.expand("$(A)-$(B)", env) == "x-y"
    assert ka.expand("$(C) stays", env) == "$(C) stays"
    assert ka.expand("$$(A) escaped, $$ alone", env) == "$(A) escaped, $ alone"


def test_env_refs_expanded_in_env_and_args(objects: list[Obj]) -> None:
    gateway = ka.expand_env_refs(
        ka.inline_field_refs(ka.inline_secrets(workload(objects, "gateway"), SECRETS), {"metadata.name": "g"})
    )
    env = env_of(gateway, "gateway")
    assert env["LLMGW_REDIS_URL"] == "redis://:pw@redis:6379/0"
    assert env["LLMGW_KEYS_REDIS_URL"] == "redis://:pw@redis-keys:6379/0"
    model = ka.expand_env_refs(
        ka.inline_field_refs(
            ka.inline_secrets(workload(objects, "vllm-all-minilm-l6-v2"), SECRETS),
            {"metadata.name": "p", "status.podIP": "10.0.0.4"},
        )
    )
    (register,) = [c for c in ka.containers(model) if c["name"] == "register"]
    assert '"id":"p"' in register["args"][3] and '"url":"http://10.0.0.4:8000"' in register["args"][3]
    assert "redis://:pw@redis:6379/0" in register["args"]
    redis = ka.expand_env_refs(ka.inline_secrets(workload(objects, "redis"), SECRETS))
    assert ka.containers(redis)[0]["args"][-1] == "pw"


def test_env_refs_use_only_entries_above() -> None:
    obj = {"spec": {"template": {"spec": {"containers": [
        {"name": "c", "env": [{"name": "A", "value": "$(B)"}, {"name": "B", "value": "b"}]}
    ]}}}}  # fmt: skip
    assert ka.containers(ka.expand_env_refs(obj))[0]["env"][0]["value"] == "$(B)"


def test_http_probes_become_exec_probes(objects: list[Obj]) -> None:
    gateway = ka.exec_probes(workload(objects, "gateway"), lambda c, url: [c, url])
    (c,) = ka.containers(gateway)
    assert c["startupProbe"]["exec"]["command"] == ["gateway", "http://127.0.0.1:9000/health"]
    assert c["readinessProbe"]["exec"]["command"] == ["gateway", "http://127.0.0.1:9000/ready"]
    assert "httpGet" not in c["livenessProbe"] and c["livenessProbe"]["periodSeconds"] == 10
    model = ka.exec_probes(workload(objects, "vllm-all-minilm-l6-v2"), lambda c, url: [url])
    (register,) = [c for c in ka.containers(model) if c["name"] == "register"]
    assert register["readinessProbe"]["exec"]["command"] == ["http://127.0.0.1:9400/metrics"]
    redis = ka.exec_probes(workload(objects, "redis"), lambda c, url: [url])
    assert ka.containers(redis)[0]["readinessProbe"]["exec"]["command"] == ["redis-cli", "ping"]


def test_probe_getters() -> None:
    assert ka.wget_get("http://h/x") == ["wget", "-q", "-O", "/dev/null", "http://h/x"]
    assert ka.python_get("http://h/x")[0] == "python3" and ka.python_get("http://h/x")[-1] == "http://h/x"


def test_service_aliases_group_names_by_address(objects: list[Obj]) -> None:
    out = ka.service_aliases(workload(objects, "gateway"), {"redis": "10.0.0.10", "redis-keys": "10.0.0.11"})
    assert out["spec"]["template"]["spec"]["hostAliases"] == [
        {"ip": "10.0.0.10", "hostnames": ["redis"]},
        {"ip": "10.0.0.11", "hostnames": ["redis-keys"]},
    ]
    grouped = ka.service_aliases(workload(objects, "gateway"), {"a": "10.0.0.1", "b": "10.0.0.1"})
    assert grouped["spec"]["template"]["spec"]["hostAliases"] == [{"ip": "10.0.0.1", "hostnames": ["a", "b"]}]


def test_host_volumes_replace_claims_and_secrets(objects: list[Obj]) -> None:
    model = ka.host_volumes(workload(objects, "vllm-all-minilm-l6-v2"), {"models": "/m"})
    volumes = {v["name"]: v for v in model["spec"]["template"]["spec"]["volumes"]}
    assert volumes["models"] == {"name": "models", "hostPath": {"path": "/m"}}
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"  # untouched
    nginx = ka.host_volumes(workload(objects, "nginx"), {"tls": "/t"})
    assert {"name": "tls", "hostPath": {"path": "/t"}} in nginx["spec"]["template"]["spec"]["volumes"]


def test_override_containers_sets_image_and_env(objects: list[Obj]) -> None:
    model = workload(objects, "vllm-all-minilm-l6-v2")
    out = ka.override_containers(model, {"vllm": {"image": "cpu:1", "env": {"HF_HOME": "/h", "NEW": 1}}})
    (vllm,) = [c for c in ka.containers(out) if c["name"] == "vllm"]
    assert vllm["image"] == "cpu:1"
    env = env_of(out, "vllm")
    assert env["HF_HOME"] == "/h" and env["NEW"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    assert [e["name"] for e in vllm["env"]].count("HF_HOME") == 1
    (register,) = [c for c in ka.containers(out) if c["name"] == "register"]
    assert register["image"] == "llmgw-gateway:0.1.0"


def test_per_replica_copies(objects: list[Obj]) -> None:
    gateway = workload(objects, "gateway")
    copies = ka.per_replica(gateway)
    assert [c["metadata"]["name"] for c in copies] == ["gateway-0", "gateway-1"]
    assert all(c["spec"]["replicas"] == 1 for c in copies) and gateway["spec"]["replicas"] == 2
    assert [c["metadata"]["name"] for c in ka.per_replica(gateway, 1)] == ["gateway-0"]


def test_unpublish_ports_after_probes(objects: list[Obj]) -> None:
    gateway = ka.unpublish_ports(ka.exec_probes(workload(objects, "gateway"), lambda c, url: [url]))
    (c,) = ka.containers(gateway)
    assert "ports" not in c and c["startupProbe"]["exec"]["command"] == ["http://127.0.0.1:9000/health"]


def test_subpath_files_mount_one_key_as_a_file(objects: list[Obj], tmp_path: Path) -> None:
    maps = [o for o in objects if o["kind"] == "ConfigMap"]
    nginx = ka.subpath_files(workload(objects, "nginx"), maps, tmp_path)
    (c,) = ka.containers(nginx)
    (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/etc/nginx/nginx.conf"]
    assert "subPath" not in mount
    (volume,) = [v for v in nginx["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    written = Path(volume["hostPath"]["path"])
    assert volume["hostPath"]["type"] == "File" and written.is_relative_to(tmp_path)
    assert written.read_text() == (REPO / "deploy/k8s/nginx/nginx.conf").read_text()
    gateway = workload(objects, "gateway")  # a whole-ConfigMap mount (no subPath) stays as it is
    assert ka.subpath_files(gateway, maps, tmp_path) == gateway
