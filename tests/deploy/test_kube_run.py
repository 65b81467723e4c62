"""`make kube-test`: the rendered Kubernetes objects (`kubectl kustomize deploy/k8s`) run with
`podman kube play` as far as podman honours them. Redis (both servers), the gateway Deployment (its two
replicas), nginx and one model Deployment (all-minilm-l6-v2: the vLLM CPU worker image and the
registration sidecar) start as pods on a podman network this test creates (its own subnet, removed
afterwards; each pod at a static address of it); an embeddings request through nginx with the openai SDK
is answered; every probe of every container passes (podman does not run probes here: the test execs each
one). Where podman differs from a kubelet the objects are adapted by testing/kube_adapt.py's named steps
(tests/deploy/test_kube_adapt.py), never the manifests themselves. Real vLLM: minutes, so it runs only
under `make kube-test` (LLMGW_KUBE_TEST=1)."""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from testing import kube_adapt as ka
from testing.podman import NO_PODMAN, PodmanNetwork, podman, podman_available, podman_env, require_image
from testing.poll import wait_until
from testing.procs import REPO, admin_api_key, http_ok

pytestmark = [
    pytest.mark.skipif(not podman_available(), reason=NO_PODMAN),
    pytest.mark.skipif(
        os.environ.get("LLMGW_KUBE_TEST") != "1", reason="long form (real vLLM): run `make kube-test`"
    ),
]

MODEL_DEPLOYMENT, MODEL = "vllm-all-minilm-l6-v2", "minilm"
# Workload name -> host number of its first pod on the test's /24 and the Service names it stands behind.
WORKLOADS: dict[str, tuple[int, tuple[str, ...]]] = {
    "redis": (10, ("redis",)),
    "redis-keys": (11, ("redis-keys",)),
    "gateway": (20, ("gateway",)),
    "nginx": (30, ("nginx",)),
    MODEL_DEPLOYMENT: (40, ()),
}
# The images of `make images` in place of the upstream ones (the cluster's `kustomize edit set image`),
# and vLLM's CPU settings as the compose CPU override sets them.
OVERRIDES: dict[str, dict[str, Any]] = {
    "redis": {"image": "localhost/llmgw-standin-redis:7.4"},
    "nginx": {"image": "localhost/llmgw-standin-nginx:1.27"},
    "gateway": {"image": "localhost/llmgw-gateway:0.1.0"},
    "register": {"image": "localhost/llmgw-gateway:0.1.0"},
    "vllm": {
        "image": "localhost/llmgw-vllm-cpu:local",
        "env": {
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
            "VLLM_CPU_OMP_THREADS_BIND": "0",
        },
    },
}
READY_DEADLINE_S = 1200.0
KUBECTL = str(Path(sys.executable).parent / "kubectl")


def getter(container: str, url: str) -> list[str]:
    return ka.wget_get(url) if container == "nginx" else ka.python_get(url)


@dataclass
class Pod:
    workload: str
    name: str  # podman's pod name: <deployment>-pod-0
    ip: str
    yaml_file: Path
    spec: dict[str, Any]

    def container(self, name: str) -> str:
        return f"{self.name}-{name}"


def plan(network: PodmanNetwork, folder: Path, secret: dict[str, str], volumes: dict[str, str]) -> list[Pod]:
    """Every pod to play: the rendered objects through kube_adapt's steps, one YAML file per pod."""
    objects = ka.rendered_objects(KUBECTL, REPO / "deploy/k8s")
    base = ipaddress.ip_network(network.subnet).network_address
    maps = [o for o in ka.select_workloads(objects, []) if o["kind"] == "ConfigMap"]
    files = folder / "files"
    copies: dict[str, list[dict[str, Any]]] = {}
    for workload in WORKLOADS:
        (obj,) = [o for o in ka.select_workloads(objects, [workload]) if o["kind"] != "ConfigMap"]
        copies[workload] = ka.per_replica(ka.statefulset_as_deployment(obj))
    aliases = {
        service: str(base + WORKLOADS[w][0]) for w in WORKLOADS for service in WORKLOADS[w][1]
    }  # a Service's name resolves to its first pod (no virtual IP without a cluster)
    pods = []
    for workload, objs in copies.items():
        for i, obj in enumerate(objs):
            ip = str(base + WORKLOADS[workload][0] + i)
            name = obj["metadata"]["name"]
            obj = ka.inline_secrets(obj, {"llmgw-secrets": secret})
            obj = ka.inline_field_refs(obj, {"metadata.name": f"{name}-pod-0", "status.podIP": ip})
            obj = ka.expand_env_refs(obj)
            obj = ka.exec_probes(obj, getter)
            obj = ka.unpublish_ports(obj)
            obj = ka.subpath_files(obj, maps, files)
            obj = ka.service_aliases(obj, aliases)
            obj = ka.host_volumes(obj, volumes)
            obj = ka.override_containers(obj, OVERRIDES)
            path = folder / f"{name}.yaml"
            path.write_text(yaml.safe_dump_all([*maps, obj]))
            pods.append(Pod(workload, f"{name}-pod-0", ip, path, obj["spec"]["template"]["spec"]))
    return pods


def tls_folder(host: Path) -> Path:
    """A self-signed certificate for nginx in place of the Secret llmgw-tls."""
    folder = host / "tls"
    folder.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-keyout", str(folder / "tls.key"), "-out", str(folder / "tls.crt")],
        check=True, capture_output=True,
    )  # fmt: skip
    for f in folder.iterdir():
        f.chmod(0o644)
    return folder


@dataclass
class Cluster:
    pods: list[Pod]
    nginx_url: str
    admin_key: str
    started: float  # time.monotonic() at the first `podman kube play`


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    for change in OVERRIDES.values():
        require_image(change["image"])
    network = PodmanNetwork.create(f"llmgw-kube-{secrets.token_hex(4)}")
    # What the pods mount from the host (uid 101 and 10001 must read it: not under pytest's 0700 folders).
    host = Path(tempfile.mkdtemp(prefix="llmgw-kube-"))
    host.chmod(0o755)
    secret = {k: secrets.token_hex(32) for k in ("redis-password", "admin-key", "vllm-api-key")}
    models = os.environ.get("LLMGW_MODELS_DIR") or str(REPO / ".cache/models")
    shm = host / "shm"  # world-writable, as the kubelet makes an emptyDir (podman: root 0755)
    shm.mkdir(mode=0o1777)
    shm.chmod(0o1777)
    volumes = {"models": models, "tls": str(tls_folder(host)), "shm": str(shm)}
    pods = plan(network, host, secret, volumes)
    try:
        start = time.monotonic()
        for pod in pods:
            podman("kube", "play", "--network", network.name, "--ip", pod.ip, str(pod.yaml_file), timeout=300)
        (nginx,) = [p for p in pods if p.workload == "nginx"][:1]
        url = f"http://{nginx.ip}:8080"
        wait_until(lambda: http_ok(f"{url}/nginx-health"), 180, "nginx answering")
        wait_until(lambda: http_ok(f"{url}/ready"), 300, "a gateway ready through nginx")
        print(f"kube pods: nginx and a gateway ready {time.monotonic() - start:.0f} s after the first play")
        yield Cluster(pods, url, secret["admin-key"], start)
    finally:
        for pod in reversed(pods):
            podman("kube", "down", str(pod.yaml_file), check=False, timeout=300)
        network.remove()
        shutil.rmtree(host, ignore_errors=True)


def probes(pod: Pod) -> list[tuple[str, str, list[str]]]:
    """(container, probe kind, exec argv) of every probe of the pod."""
    out = []
    for c in pod.spec["containers"]:
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            if kind in c:
                out.append((c["name"], kind, list(c[kind]["exec"]["command"])))
    return out


def passes(pod: Pod, container: str, argv: list[str]) -> Callable[[], bool]:
    """A check: the probe's command, exec'd in the container as the kubelet would, exits 0."""

    def check() -> bool:
        done = subprocess.run(
            ["podman", "exec", pod.container(container), *argv],
            env=podman_env(), capture_output=True, check=False, timeout=60,
        )  # fmt: skip
        return done.returncode == 0

    return check


def test_every_probe_passes(cluster: Cluster) -> None:
    for pod in cluster.pods:
        for container, kind, argv in probes(pod):
            wait_until(passes(pod, container, argv), READY_DEADLINE_S, f"{pod.name} {container} {kind}", 2)
            print(f"{pod.name} {container} {kind}: passes ({time.monotonic() - cluster.started:.0f} s)")


def test_embeddings_through_nginx(cluster: Cluster) -> None:
    key = admin_api_key(cluster.nginx_url, cluster.admin_key, "kube-test", 600)
    client = openai.OpenAI(base_url=f"{cluster.nginx_url}/v1", api_key=key, max_retries=0, timeout=120)

    def answered() -> bool:
        try:
            return len(client.embeddings.create(model=MODEL, input=["one", "two"]).data) == 2
        except openai.APIError:
            return False

    wait_until(answered, READY_DEADLINE_S, "embeddings answered through nginx", interval_s=2)
    print(
        f"embeddings answered through nginx {time.monotonic() - cluster.started:.0f} s after the first play"
    )
    vectors = client.embeddings.create(model=MODEL, input="hello")
    assert len(vectors.data[0].embedding) == 384


def test_security_context_honoured(cluster: Cluster) -> None:
    """The gateway runs as the manifests say: uid 10001, read-only root filesystem."""
    gateway = next(p for p in cluster.pods if p.workload == "gateway")
    name = gateway.container("gateway")
    assert podman("exec", name, "id", "-u").strip() == "10001"
    wrote = subprocess.run(
        ["podman", "exec", name, "touch", "/probe"], env=podman_env(), capture_output=True, check=False
    )
    assert wrote.returncode != 0
