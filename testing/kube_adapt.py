"""The rendered Kubernetes objects (`kubectl kustomize deploy/k8s`) adapted where podman 4.3's
`podman kube play` differs from a kubelet, for `make kube-test` (tests/deploy/test_kube_run.py). Each
step is one named difference; the manifests themselves are never changed to suit podman:

- :func:`select_workloads`: only the workloads (Deployment, StatefulSet) named, and the ConfigMaps;
  podman has no Services, NetworkPolicies, autoscalers or disruption budgets.
- :func:`statefulset_as_deployment`: podman plays no StatefulSet; its claim templates become emptyDirs.
- :func:`inline_secrets`: a Secret in the YAML fails to parse, so ``secretKeyRef`` env becomes a value.
- :func:`inline_field_refs`: ``fieldRef`` env (the pod's name and IP) becomes a value.
- :func:`expand_env_refs`: podman does not expand ``$(VAR)`` in env values, command and args; the kubelet
  does (earlier env entries only; ``$$`` escapes).
- :func:`exec_probes`: podman turns an httpGet probe into ``curl`` inside the container (no image has
  curl): each becomes an exec probe that fetches the same URL with a tool the image has.
- :func:`service_aliases`: no Services (no cluster DNS): each Service name a pod uses becomes a
  ``hostAliases`` entry with the static address of the pod behind it.
- :func:`unpublish_ports`: podman 4.3 publishes every ``containerPort`` on the host's 0.0.0.0 (a kubelet
  opens it on the pod's address only): the ports are dropped, the pods are reached at their own address.
- :func:`subpath_files`: podman mounts a ConfigMap volume as a directory even with ``subPath`` (runc:
  "not a directory"): each such mount becomes a hostPath file holding that key.
- :func:`host_volumes`: volumes podman cannot provide as a cluster would become hostPath volumes: the
  models' claim, the TLS Secret, and the ``medium: Memory`` emptyDir for /dev/shm (podman 4.3 makes an
  emptyDir a disk volume with the image folder's mode, root 0755 for /dev/shm, where the kubelet makes
  it world-writable: vLLM, uid 10001, failed "Permission denied: '/psm_...'").
- :func:`override_containers`: the image and env a CPU-only node needs (the CPU worker image, vLLM's CPU
  settings), as the compose CPU override does; the cluster analogue is `kustomize edit set image`.
- :func:`per_replica`: one Deployment per replica, so that each pod gets its own inlined name and address.
"""

from __future__ import annotations

import copy
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
WORKLOADS = ("Deployment", "StatefulSet")
_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def rendered_objects(kubectl: str, folder: Path) -> list[Obj]:
    """The objects ``kubectl kustomize folder`` renders (what `kubectl apply -k` would send)."""
    out = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return [o for o in yaml.safe_load_all(out) if o]


def select_workloads(objects: Iterable[Obj], names: Iterable[str]) -> list[Obj]:
    """The workloads called ``names`` (in that order) and every ConfigMap, deep-copied."""
    objects = list(objects)
    by_name = {o["metadata"]["name"]: o for o in objects if o.get("kind") in WORKLOADS}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise KeyError(f"no workload named {missing} in the rendered objects")
    maps = [o for o in objects if o.get("kind") == "ConfigMap"]
    return [copy.deepcopy(o) for o in [*maps, *(by_name[n] for n in names)]]


def statefulset_as_deployment(obj: Obj) -> Obj:
    """A StatefulSet as the Deployment podman can play: each volume claim template an emptyDir."""
    if obj.get("kind") != "StatefulSet":
        return obj
    out = copy.deepcopy(obj)
    out["kind"] = "Deployment"
    spec = out["spec"]
    spec.pop("serviceName", None)
    claims = spec.pop("volumeClaimTemplates", [])
    volumes = spec["template"]["spec"].setdefault("volumes", [])
    volumes.extend({"name": c["metadata"]["name"], "emptyDir": {}} for c in claims)
    return out


def containers(obj: Obj) -> list[Obj]:
    """The containers (init containers first) of a workload's pod template."""
    pod = obj["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def inline_env_refs(obj: Obj, ref_kind: str, value_of: Callable[[dict[str, str]], str]) -> Obj:
    """Each ``valueFrom.<ref_kind>`` env entry as the literal ``value_of(reference)``."""
    out = copy.deepcopy(obj)
    for container in containers(out):
        for entry in container.get("env", []):
            ref = entry.get("valueFrom", {}).get(ref_kind)
            if ref is not None:
                entry.pop("valueFrom")
                entry["value"] = value_of(ref)
    return out


def inline_secrets(obj: Obj, secrets: Mapping[str, Mapping[str, str]]) -> Obj:
    """Each ``valueFrom.secretKeyRef`` env entry as the literal value from ``secrets[name][key]``."""
    return inline_env_refs(obj, "secretKeyRef", lambda ref: secrets[ref["name"]][ref["key"]])


def inline_field_refs(obj: Obj, fields: Mapping[str, str]) -> Obj:
    """Each ``valueFrom.fieldRef`` env entry as ``fields[fieldPath]`` (e.g. ``status.podIP``)."""
    return inline_env_refs(obj, "fieldRef", lambda ref: fields[ref["fieldPath"]])


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's expansion: ``$(VAR)`` of a known VAR becomes its value, ``$$`` becomes ``$``, an
    unknown reference stays as written."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REF.sub(one, text)


def expand_env_refs(obj: Obj) -> Obj:
    """``$(VAR)`` expanded in each container's env values (from the entries above it), command and args
    (from all its literal env values), as the kubelet does."""
    out = copy.deepcopy(obj)
    for container in containers(out):
        env: dict[str, str] = {}
        for entry in container.get("env", []):
            if "value" in entry:
                entry["value"] = expand(str(entry["value"]), env)
                env[entry["name"]] = entry["value"]
        for key in ("command", "args"):
            if key in container:
                container[key] = [expand(str(a), env) for a in container[key]]
    return out


def python_get(url: str) -> list[str]:
    """An HTTP GET that fails on an error status, for images with python3."""
    code = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)"
    return ["python3", "-c", code, url]


def wget_get(url: str) -> list[str]:
    """An HTTP GET that fails on an error status, for images with wget (nginx)."""
    return ["wget", "-q", "-O", "/dev/null", url]


def exec_probes(obj: Obj, getter: Callable[[str, str], list[str]]) -> Obj:
    """Each httpGet probe as an exec probe running ``getter(container name, url)`` on the same URL
    (named ports resolved to the container's own port numbers)."""
    out = copy.deepcopy(obj)
    for container in containers(out):
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container.get(kind)
            if probe is None or "httpGet" not in probe:
                continue
            get = probe.pop("httpGet")
            port = ports.get(get["port"], get["port"])
            url = f"{get.get('scheme', 'HTTP').lower()}://127.0.0.1:{port}{get.get('path', '/')}"
            probe["exec"] = {"command": getter(container["name"], url)}
    return out


def service_aliases(obj: Obj, addresses: Mapping[str, str]) -> Obj:
    """``hostAliases``: each Service name in ``addresses`` resolves to the address of a pod behind it."""
    out = copy.deepcopy(obj)
    pod = out["spec"]["template"]["spec"]
    by_ip: dict[str, list[str]] = {}
    for name, ip in addresses.items():
        by_ip.setdefault(ip, []).append(name)
    pod["hostAliases"] = [{"ip": ip, "hostnames": names} for ip, names in by_ip.items()]
    return out


def host_volumes(obj: Obj, paths: Mapping[str, str]) -> Obj:
    """Each volume named in ``paths`` as a hostPath volume of that host path."""
    out = copy.deepcopy(obj)
    for volume in out["spec"]["template"]["spec"].get("volumes", []):
        if volume["name"] in paths:
            name = volume["name"]
            volume.clear()
            volume.update({"name": name, "hostPath": {"path": paths[name]}})
    return out


def override_containers(obj: Obj, overrides: Mapping[str, Mapping[str, Any]]) -> Obj:
    """Per container name: ``image`` replaced, ``env`` entries set (replacing those of the same name)."""
    out = copy.deepcopy(obj)
    for container in containers(out):
        change = overrides.get(container["name"])
        if change is None:
            continue
        if "image" in change:
            container["image"] = change["image"]
        extra = dict(change.get("env", {}))
        kept = [e for e in container.get("env", []) if e["name"] not in extra]
        container["env"] = kept + [{"name": k, "value": str(v)} for k, v in extra.items()]
    return out


def per_replica(obj: Obj, replicas: int | None = None) -> list[Obj]:
    """One single-replica Deployment per replica (``replicas`` or the workload's own count), named
    ``<name>-<i>``: a kubelet gives each pod its own name and address (``fieldRef``), which podman does not,
    so those values are inlined per pod."""
    count = int(obj["spec"].get("replicas", 1)) if replicas is None else replicas
    copies = []
    for i in range(count):
        one = copy.deepcopy(obj)
        one["metadata"]["name"] = f"{obj['metadata']['name']}-{i}"
        one["spec"]["replicas"] = 1
        copies.append(one)
    return copies


def unpublish_ports(obj: Obj) -> Obj:
    """Every container without ``ports`` (run after :func:`exec_probes`, which reads the named ones)."""
    out = copy.deepcopy(obj)
    for container in containers(out):
        container.pop("ports", None)
    return out


def subpath_files(obj: Obj, config_maps: Iterable[Obj], folder: Path) -> Obj:
    """Each ``subPath`` mount of a ConfigMap volume as a hostPath file under ``folder`` holding that key."""
    out = copy.deepcopy(obj)
    pod = out["spec"]["template"]["spec"]
    data = {m["metadata"]["name"]: m.get("data", {}) for m in config_maps}
    maps = {v["name"]: v["configMap"]["name"] for v in pod.get("volumes", []) if "configMap" in v}
    for container in containers(out):
        for mount in container.get("volumeMounts", []):
            if mount["name"] not in maps or "subPath" not in mount:
                continue
            key = mount.pop("subPath")
            path = folder / maps[mount["name"]] / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(data[maps[mount["name"]]][key])
            path.chmod(0o644)
            name = f"{mount['name']}-{key}".replace(".", "-").replace("_", "-").lower()
            mount["name"] = name
            pod["volumes"].append({"name": name, "hostPath": {"path": str(path), "type": "File"}})
    return out
