"""deploy/k8s, validated offline (no cluster here): `kubectl kustomize` builds it, every object passes
the Kubernetes schemas (kubernetes-validate, strict), KEDA's ScaledObjects pass KEDA's schema kept in
deploy/k8s/crds/, and policy: resources, probes, security contexts, drain timing, autoscaling."""

from __future__ import annotations

import copy
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from llmgw_contract.drain import DRAIN_SCRIPT
from llmgw_contract.fleet import load_fleet
from llmgw_contract.registry import RegistryTiming, ReplicaRecord
from llmgw_tools.deploy.common import ALERTMANAGER_CONF, ALERTMANAGER_PORT, REPO, alerting_conf

K8S = REPO / "deploy" / "k8s"
KUBECTL = str(Path(sys.executable).parent / "kubectl")
KEDA_CRD = K8S / "crds" / "keda.sh_scaledobjects.yaml"
# The oldest Kubernetes this base is meant for, and the newest that kubernetes-validate knows.
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")

# Containers that may not run as non-root, each with the reason; everything else must.
ROOT_EXCEPTIONS = {
    "vllm": "vllm/vllm-openai runs as root: it writes its caches under /root/.cache (torch.compile, Triton, "
    "FlashInfer) and no non-root variant is published; it still drops every capability and cannot escalate.",
}
# Containers whose root file system may stay writable, each with the reason.
WRITABLE_ROOT_EXCEPTIONS = {
    "vllm": "vLLM and its kernels compile and cache into the image's home and /tmp at start-up.",
}

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def objects() -> list[Obj]:
    built = subprocess.run([KUBECTL, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    return [d for d in yaml.safe_load_all(built.stdout) if d]


def of_kind(objects: list[Obj], kind: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def containers(objects: list[Obj]) -> Iterator[tuple[str, Obj, Obj]]:
    """(workload name, pod spec, container) for every container and init container."""
    for o in objects:
        if o["kind"] in WORKLOADS:
            pod = o["spec"]["template"]["spec"]
            for c in pod.get("initContainers", []) + pod["containers"]:
                yield o["metadata"]["name"], pod, c


def managed_models() -> list[str]:
    return [m.name for m in load_fleet(REPO / "fleet.yaml").models if m.managed]


def test_kustomize_builds_the_whole_stack(objects: list[Obj]) -> None:
    assert set(of_kind(objects, "Namespace")) == {"llmgw"}
    assert all(o["metadata"].get("namespace") == "llmgw" for o in objects if o["kind"] != "Namespace")
    deployments = of_kind(objects, "Deployment")
    assert {"redis", "gateway", "llmgw-scaler", "nginx", "prometheus", "alertmanager"} <= set(deployments)
    models = {
        o["metadata"]["annotations"]["llmgw.io/model"]
        for o in deployments.values()
        if "vllm" in o["metadata"]["name"]
    }
    assert models == set(managed_models())
    assert set(of_kind(objects, "ScaledObject")) == {n for n in deployments if n.startswith("vllm-")}
    services = {"redis", "redis-keys", "gateway", "llmgw-scaler", "nginx", "prometheus", "alertmanager"}
    assert set(of_kind(objects, "Service")) == services
    assert set(of_kind(objects, "HorizontalPodAutoscaler")) == {"gateway"}
    assert {"gateway", "llmgw-scaler", "nginx"} <= set(of_kind(objects, "PodDisruptionBudget"))
    assert {n.rsplit("-", 1)[0] for n in of_kind(objects, "ConfigMap")} == {
        "nginx-conf",
        "prometheus-conf",
        "alertmanager-conf",
        "llmgw-fleet",
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_passes_the_kubernetes_schemas(objects: list[Obj], version: str) -> None:
    for o in objects:
        if o["apiVersion"].startswith("keda.sh/"):
            continue  # a CRD: checked against KEDA's own schema below
        kubernetes_validate.validate(o, version, strict=True)


def test_the_keda_crd_kept_in_the_repo_is_a_valid_crd() -> None:
    crd = yaml.safe_load(KEDA_CRD.read_text())
    kubernetes_validate.validate(crd, VERSIONS[-1], strict=True)
    assert crd["spec"]["group"] == "keda.sh" and crd["spec"]["names"]["kind"] == "ScaledObject"


def strict(schema: Any) -> Any:
    """The apiserver's strict field validation (kubectl's default): unknown fields are errors."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out and k8s_object(out):
        out["additionalProperties"] = False
    return out


def k8s_object(schema: Obj) -> bool:
    return not schema.get("x-kubernetes-preserve-unknown-fields", False)


def keda_validator() -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(KEDA_CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    schema = strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft7Validator(schema)


def test_scaled_objects_pass_kedas_schema(objects: list[Obj]) -> None:
    validator = keda_validator()
    scaled = list(of_kind(objects, "ScaledObject").values())
    assert scaled
    for so in scaled:
        assert so["apiVersion"] == "keda.sh/v1alpha1"
        errors = [e.message for e in validator.iter_errors(so)]
        assert errors == [], so["metadata"]["name"]
    # The check has teeth: a misspelt field and a missing trigger type are refused.
    typo = copy.deepcopy(scaled[0])
    typo["spec"]["minReplicas"] = typo["spec"].pop("minReplicaCount")
    del typo["spec"]["triggers"][0]["type"]
    messages = " ".join(e.message for e in validator.iter_errors(typo))
    assert "minReplicas" in messages and "'type' is a required property" in messages


def test_every_container_has_resources_probes_and_a_tight_security_context(objects: list[Obj]) -> None:
    seen = set()
    for workload, pod, c in containers(objects):
        where = f"{workload}/{c['name']}"
        seen.add(c["name"])
        res = c.get("resources", {})
        assert {"cpu", "memory"} <= set(res.get("requests", {})), f"{where}: cpu and memory requests"
        assert "memory" in res.get("limits", {}), f"{where}: a memory limit"
        assert "readinessProbe" in c and "livenessProbe" in c, f"{where}: readiness and liveness probes"
        sc, pod_sc = c.get("securityContext", {}), pod.get("securityContext", {})
        assert sc.get("allowPrivilegeEscalation") is False, where
        assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
        assert pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
        assert not sc.get("privileged", False), where
        non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot", False))
        assert non_root or c["name"] in ROOT_EXCEPTIONS, f"{where}: runs as root without a listed reason"
        read_only = sc.get("readOnlyRootFilesystem", False)
        assert read_only or c["name"] in WRITABLE_ROOT_EXCEPTIONS, f"{where}: writable root without a reason"
    assert set(ROOT_EXCEPTIONS) <= seen  # no stale exception


def test_model_pods_have_gpus_shm_shared_weights_and_probes_sized_for_model_load(objects: list[Obj]) -> None:
    claims = of_kind(objects, "PersistentVolumeClaim")
    for name, d in of_kind(objects, "Deployment").items():
        if not name.startswith("vllm-"):
            continue
        pod = d["spec"]["template"]["spec"]
        vllm = next(c for c in pod["containers"] if c["name"] == "vllm")
        gpus = vllm["resources"]["limits"]["nvidia.com/gpu"]
        assert int(gpus) >= 1 and vllm["resources"]["requests"]["nvidia.com/gpu"] == gpus
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m for m in vllm["volumeMounts"]}
        assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"]["medium"] == "Memory"
        claim = volumes[mounts["/models"]["name"]]["persistentVolumeClaim"]["claimName"]
        assert claim in claims and mounts["/models"]["readOnly"] is True
        startup = vllm["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 600, name  # minutes to load weights
        assert vllm["livenessProbe"]["httpGet"]["path"] == "/health"


def test_model_pods_drain_within_their_termination_grace(objects: list[Obj]) -> None:
    for name, d in of_kind(objects, "Deployment").items():
        if not name.startswith("vllm-"):
            continue
        pod = d["spec"]["template"]["spec"]
        vllm = next(c for c in pod["containers"] if c["name"] == "vllm")
        cmd = vllm["lifecycle"]["preStop"]["exec"]["command"]
        assert cmd[:3] == ["python3", "-c", DRAIN_SCRIPT]
        grace, url, settle = float(cmd[3]), cmd[4], float(cmd[5])
        assert settle == RegistryTiming().drain_settle_s  # the registry's one settle time
        assert url == "http://127.0.0.1:8000"
        # The pod's clock covers the preStop (settle + drain) and vLLM's own exit after SIGTERM.
        assert pod["terminationGracePeriodSeconds"] >= settle + grace + 20, name
        register = next(c for c in pod["containers"] if c["name"] == "register")
        args = register["args"]
        assert float(args[args.index("--drain-grace") + 1]) == grace
        assert float(args[args.index("--drain-settle") + 1]) == settle


def test_registration_sidecar_publishes_a_replica_record_of_its_pod(objects: list[Obj]) -> None:
    for name, d in of_kind(objects, "Deployment").items():
        if not name.startswith("vllm-"):
            continue
        register = next(c for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "register")
        assert register["command"] == ["python"] and register["args"][:2] == ["-m", "llmgw_contract.sidecar"]
        env = {
            e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
            for e in register["env"]
            if "fieldRef" in e["valueFrom"]
        }
        assert env == {"POD_NAME": "metadata.name", "POD_IP": "status.podIP"}
        text = register["args"][register["args"].index("--record") + 1]
        record = ReplicaRecord.model_validate_json(
            text.replace("$(POD_NAME)", "p").replace("$(POD_IP)", "10.1.2.3")
        )
        assert record.model == d["metadata"]["annotations"]["llmgw.io/model"]
        assert record.id == "p" and record.url == "http://10.1.2.3:8000"
        redis_url = register["args"][register["args"].index("--redis-url") + 1]
        assert redis_url == "redis://:$(REDIS_PASSWORD)@redis:6379/0"
        assert secret_refs(register) == {"REDIS_PASSWORD": "redis-password", "VLLM_API_KEY": "vllm-api-key"}


def test_each_model_scales_on_its_demand_pushed_by_the_namespace_scaler(objects: list[Obj]) -> None:
    deployments, services = of_kind(objects, "Deployment"), of_kind(objects, "Service")
    fleet = {m.name: m for m in load_fleet(REPO / "fleet.yaml").models}
    for name, so in of_kind(objects, "ScaledObject").items():
        model = fleet[so["metadata"]["annotations"]["llmgw.io/model"]]
        assert so["spec"]["scaleTargetRef"]["name"] == name and name in deployments
        assert so["spec"]["minReplicaCount"] == model.replicas <= so["spec"]["maxReplicaCount"]
        (trigger,) = so["spec"]["triggers"]
        meta = trigger["metadata"]
        assert trigger["type"] == "external-push"
        assert meta["model"] == model.name
        host, port = meta["scalerAddress"].split(":")
        service, namespace = host.split(".")[:2]
        assert namespace == services[service]["metadata"]["namespace"]
        assert int(port) in {p["port"] for p in services[service]["spec"]["ports"]}
    scaler = deployments["llmgw-scaler"]
    assert scaler["spec"]["replicas"] >= 2  # stateless beyond Redis: several answer alike
    (c,) = scaler["spec"]["template"]["spec"]["containers"]
    assert c["command"][0] == "llmgw-scaler"


def test_gateway_probes_autoscaling_and_disruption_budget(objects: list[Obj]) -> None:
    gateway = of_kind(objects, "Deployment")["gateway"]
    c = gateway["spec"]["template"]["spec"]["containers"][0]
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    hpa = of_kind(objects, "HorizontalPodAutoscaler")["gateway"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "gateway" and hpa["spec"]["minReplicas"] >= 2
    pdb = of_kind(objects, "PodDisruptionBudget")["gateway"]
    assert pdb["spec"]["selector"]["matchLabels"] == gateway["spec"]["selector"]["matchLabels"]
    volumes = {v["name"]: v for v in gateway["spec"]["template"]["spec"]["volumes"]}
    fleet_map = of_kind(objects, "ConfigMap")[volumes["fleet"]["configMap"]["name"]]
    assert fleet_map["data"]["fleet.yaml"] == (REPO / "fleet.yaml").read_text()


def test_services_select_pods_that_exist(objects: list[Obj]) -> None:
    pod_labels = [o["spec"]["template"]["metadata"]["labels"] for o in objects if o["kind"] in WORKLOADS]
    for name, svc in of_kind(objects, "Service").items():
        selector = svc["spec"]["selector"]
        assert any(selector.items() <= labels.items() for labels in pod_labels), name


def test_nginx_runs_the_rendered_template_with_tls(objects: list[Obj]) -> None:
    nginx = of_kind(objects, "Deployment")["nginx"]
    pod = nginx["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    conf = of_kind(objects, "ConfigMap")[volumes["conf"]["configMap"]["name"]]["data"]["nginx.conf"]
    assert conf == (K8S / "nginx" / "nginx.conf").read_text()
    assert "server gateway:9000" in conf and "listen 8443 ssl;" in conf
    assert volumes["tls"]["secret"]["secretName"] == "llmgw-tls"
    ports = {p["name"]: p["containerPort"] for p in pod["containers"][0]["ports"]}
    assert ports == {"http": 8080, "https": 8443}
    assert "exec nginx" in shlex.join(pod["containers"][0]["command"])


def test_prometheus_configuration_passes_promtool(tmp_path: Path) -> None:
    """Debian's promtool is built without Kubernetes discovery: the discovery blocks become static
    targets, and the rest (jobs, relabelling rules) is checked for real."""
    config = yaml.safe_load((K8S / "prometheus" / "prometheus.yml").read_text())
    for job in config["scrape_configs"]:
        assert job.pop("kubernetes_sd_configs") == [{"role": "pod", "namespaces": {"own_namespace": True}}]
        job["static_configs"] = [{"targets": ["127.0.0.1:9"]}]
    assert config["rule_files"] == ["/etc/prometheus/llmgw-rules.yml"]  # the ConfigMap's mount
    config["rule_files"] = [str(K8S / "prometheus" / "llmgw-rules.yml")]
    checked_file = tmp_path / "prometheus.yml"
    checked_file.write_text(yaml.safe_dump(config))
    checked = subprocess.run(
        ["promtool", "check", "config", str(checked_file)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert [j["job_name"] for j in config["scrape_configs"]] == ["gateway", "vllm", "supervisor"]


def test_prometheus_sends_alerts_to_the_namespace_alertmanager(objects: list[Obj]) -> None:
    """prometheus.yml's `alerting:` names the Alertmanager Service on its port, whose pods mount the
    ConfigMap rendered from deploy/alertmanager/alertmanager.yml (a copy: kustomize reads only below k8s/)."""
    config = yaml.safe_load((K8S / "prometheus" / "prometheus.yml").read_text())
    assert (
        config["alerting"] == yaml.safe_load(alerting_conf(f"alertmanager:{ALERTMANAGER_PORT}"))["alerting"]
    )
    service = of_kind(objects, "Service")["alertmanager"]
    assert [p["port"] for p in service["spec"]["ports"]] == [ALERTMANAGER_PORT]
    template = of_kind(objects, "Deployment")["alertmanager"]["spec"]["template"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    pod = template["spec"]
    (conf_map,) = [o for n, o in of_kind(objects, "ConfigMap").items() if n.startswith("alertmanager-conf")]
    assert pod["volumes"][0]["configMap"]["name"] == conf_map["metadata"]["name"]
    rendered = yaml.safe_load(conf_map["data"]["alertmanager.yml"])
    assert rendered == yaml.safe_load(ALERTMANAGER_CONF.read_text())
    assert "--config.file=/etc/alertmanager/alertmanager.yml" in pod["containers"][0]["args"]


def test_model_deployments_roll_a_new_pod_in_before_an_old_one_drains(objects: list[Obj]) -> None:
    """A changed fleet rolls like the supervisor's replace: a new pod ready first (maxUnavailable 0,
    maxSurge 1), then the old one drains through its preStop hook."""
    for name, d in of_kind(objects, "Deployment").items():
        if not name.startswith("vllm-"):
            continue
        strategy = d["spec"]["strategy"]
        assert strategy["type"] == "RollingUpdate", name
        assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}, name
        vllm = next(c for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
        assert vllm["lifecycle"]["preStop"]["exec"]["command"][:3] == ["python3", "-c", DRAIN_SCRIPT]
        assert vllm["readinessProbe"]["httpGet"]["path"] in {"/health", "/v1/models"}, name


def secret_refs(container: Obj) -> dict[str, str]:
    """The container's env variables read from the Secret llmgw-secrets, by the Secret's key."""
    out = {}
    for e in container.get("env", []):
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None:
            assert ref["name"] == "llmgw-secrets", e
            out[e["name"]] = ref["key"]
    return out


def env_values(container: Obj) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def test_gateways_run_with_keys_on_the_admin_key_and_vllms_key(objects: list[Obj]) -> None:
    (c,) = of_kind(objects, "Deployment")["gateway"]["spec"]["template"]["spec"]["containers"]
    assert env_values(c)["LLMGW_AUTH"] == "true"
    assert secret_refs(c) == {
        "REDIS_PASSWORD": "redis-password",
        "LLMGW_ADMIN_KEY": "admin-key",
        "LLMGW_VLLM_API_KEY": "vllm-api-key",
    }
    names = [e["name"] for e in c["env"]]
    assert names.index("REDIS_PASSWORD") < names.index("LLMGW_REDIS_URL")  # $(...) sees earlier vars only
    assert env_values(c)["LLMGW_REDIS_URL"] == "redis://:$(REDIS_PASSWORD)@redis:6379/0"
    assert env_values(c)["LLMGW_KEYS_REDIS_URL"] == "redis://:$(REDIS_PASSWORD)@redis-keys:6379/0"


def test_vllm_starts_with_an_api_key_from_the_secret(objects: list[Obj]) -> None:
    for name, _, c in containers(objects):
        if c["name"] == "vllm":
            assert secret_refs(c) == {"VLLM_API_KEY": "vllm-api-key"}, name  # vLLM's --api-key variable
            assert "--api-key" not in c["args"], "the key stays out of the command line"


def redis_args(objects: list[Obj], name: str) -> list[str]:
    (c,) = [c for w, _, c in containers(objects) if w == name]
    assert secret_refs(c) == {"REDIS_PASSWORD": "redis-password", "REDISCLI_AUTH": "redis-password"}
    args: list[str] = c["args"]
    assert args[-2:] == ["--requirepass", "$(REDIS_PASSWORD)"]
    return args


def test_redis_has_a_password_and_only_the_key_store_persists(objects: list[Obj]) -> None:
    from llmgw_tools.stack.redis import EPHEMERAL_REDIS_ARGS, KEYS_REDIS_ARGS

    state = redis_args(objects, "redis")
    assert state[1 : 1 + len(EPHEMERAL_REDIS_ARGS)] == list(EPHEMERAL_REDIS_ARGS)
    keys = redis_args(objects, "redis-keys")
    assert keys[1 : 1 + len(KEYS_REDIS_ARGS)] == list(KEYS_REDIS_ARGS)
    store = of_kind(objects, "StatefulSet")["redis-keys"]
    (claim,) = store["spec"]["volumeClaimTemplates"]
    (mount,) = store["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert mount == {"name": claim["metadata"]["name"], "mountPath": "/data"}


def pod_labels(objects: list[Obj]) -> dict[str, dict[str, str]]:
    return {
        o["metadata"]["name"]: o["spec"]["template"]["metadata"]["labels"]
        for o in objects
        if o["kind"] in WORKLOADS
    }


def admitted(policies: list[Obj], dest: dict[str, str], src: dict[str, str], port: int) -> bool:
    """NetworkPolicy semantics for ingress within the namespace: open unless a policy selects the pod,
    then only what one of the selecting policies allows."""
    selecting = [
        p
        for p in policies
        if "Ingress" in p["spec"]["policyTypes"]
        and p["spec"]["podSelector"]["matchLabels"].items() <= dest.items()
    ]
    if not selecting:
        return True
    for p in selecting:
        for rule in p["spec"]["ingress"]:
            ports = {x["port"] for x in rule.get("ports", [])}
            peers = [f["podSelector"]["matchLabels"] for f in rule["from"]]
            if (not ports or port in ports) and any(m.items() <= src.items() for m in peers):
                return True
    return False


def test_network_policies_fence_vllm_and_redis(objects: list[Obj]) -> None:
    policies = list(of_kind(objects, "NetworkPolicy").values())
    pods = pod_labels(objects)
    models = {n for n in pods if n.startswith("vllm-")}
    model = min(models)
    allowed = {
        (model, 8000): {"gateway", "prometheus"},  # not even another model's pod
        ("redis", 6379): {"gateway", "llmgw-scaler", *models},  # the model pods' registration sidecars
        ("redis-keys", 6379): {"gateway"},
    }
    for (dest, port), sources in allowed.items():
        for src in pods:
            ok = admitted(policies, pods[dest], pods[src], port)
            assert ok == (src in sources), f"{src} -> {dest}:{port}: {'open' if ok else 'closed'}"
    supervisor = {"app.kubernetes.io/name": "llmgw-workers"}
    assert admitted(policies, pods["redis"], supervisor, 6379)
    assert not admitted(policies, pods["redis-keys"], supervisor, 6379)


def test_vllm_pods_reach_out_to_dns_and_the_state_redis_only(objects: list[Obj]) -> None:
    """A media URL must not make a worker fetch anything (the gateway refuses internal addresses; the
    pod itself may open nothing but DNS and its sidecar's Redis)."""
    egress = [p for p in of_kind(objects, "NetworkPolicy").values() if "Egress" in p["spec"]["policyTypes"]]
    pods = pod_labels(objects)
    model = pods[min(n for n in pods if n.startswith("vllm-"))]
    selecting = [p for p in egress if p["spec"]["podSelector"]["matchLabels"].items() <= model.items()]
    assert len(selecting) == 1
    rules = selecting[0]["spec"]["egress"]
    ports = {(x["protocol"], x["port"]) for rule in rules for x in rule["ports"]}
    assert ports == {("UDP", 53), ("TCP", 53), ("TCP", 6379)}
    redis_rule = next(r for r in rules if ("TCP", 6379) in {(x["protocol"], x["port"]) for x in r["ports"]})
    assert redis_rule["to"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "redis"}}}]


def test_nginx_service_keeps_the_clients_address(objects: list[Obj]) -> None:
    svc = of_kind(objects, "Service")["nginx"]
    assert svc["spec"]["type"] == "LoadBalancer" and svc["spec"]["externalTrafficPolicy"] == "Local"


def test_model_pods_keep_their_deletion_cost_with_a_token_only_their_sidecar_mounts(
    objects: list[Obj],
) -> None:
    """The sidecar patches its pod's ``controller.kubernetes.io/pod-deletion-cost``
    (llmgw_contract/deletion_cost.py): the pods' account may get and patch pods; vLLM gets no token."""
    [rule] = of_kind(objects, "Role")["llmgw-model"]["rules"]
    assert rule == {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]}
    binding = of_kind(objects, "RoleBinding")["llmgw-model"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llmgw-model", "namespace": "llmgw"}]
    assert of_kind(objects, "ServiceAccount")["llmgw-model"]["automountServiceAccountToken"] is False
    models = {n: d for n, d in of_kind(objects, "Deployment").items() if n.startswith("vllm-")}
    assert models
    for d in models.values():
        pod = d["spec"]["template"]["spec"]
        assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == ("llmgw-model", False)
        vllm, sidecar = pod["containers"]
        token_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
        assert token_dir not in [m["mountPath"] for m in vllm.get("volumeMounts", [])]
        assert token_dir in [m["mountPath"] for m in sidecar["volumeMounts"]]
