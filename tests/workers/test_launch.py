"""The vLLM command line and environment of each replica, from the fleet file."""

from __future__ import annotations

import json

import pytest

from llmgw_contract.fleet import NO_MEDIA_DOMAIN, FleetError, load_fleet, parse_fleet
from testing.procs import REPO
from workers.replica.launch import ReplicaSpec, build_launch, plan_replicas


def test_default_fleet_replicas_get_ports_and_cores() -> None:
    fleet = load_fleet(REPO / "fleet.yaml")
    specs = plan_replicas(fleet.models, fleet.defaults, 2)
    assert [s.id for s in specs] == [
        "smollm2-135m-instruct-0",
        "smollm2-135m-instruct-1",
        "gemma-3-270m-0",
        "all-minilm-l6-v2-0",
    ]
    assert [s.port for s in specs] == [8100, 8101, 8102, 8103]
    assert [s.device for s in specs] == [0, 1, 1, 0]


def test_cpu_launch_pins_core_and_sets_kv_budget() -> None:
    fleet = load_fleet(REPO / "fleet.yaml")
    spec = plan_replicas(fleet.models, fleet.defaults, 2)[1]
    launch = build_launch(spec, "/models/smollm2", python="py")
    assert launch.argv[:3] == ["taskset", "-c", "1"]
    argv = launch.argv
    assert argv[argv.index("--served-model-name") + 1 : argv.index("--served-model-name") + 3] == [
        "smollm2-135m-instruct",
        "smollm2",
    ]
    assert argv[argv.index("--port") + 1] == "8101"
    assert argv[argv.index("--max-num-seqs") + 1] == "16"  # concurrency 8, twice: migration's headroom
    assert "--enforce-eager" in argv and argv[argv.index("--dtype") + 1] == "float32"
    assert launch.env["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert launch.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert launch.env["HF_HUB_OFFLINE"] == "1"


def test_gpu_launch_sets_budget_and_device() -> None:
    fleet = parse_fleet(
        "defaults: {device: gpu}\nmodels:\n - name: m\n   source: {hf: org/m}\n   replicas: 2\n"
        "   budget: {gpu_memory_utilization: 0.3}\n"
        "   engine: {tool_call_parser: hermes, extra_args: [--seed, '1']}\n"
    )
    specs = plan_replicas(fleet.models, fleet.defaults, 1)
    launch = build_launch(specs[1], "org/m", python="py")
    argv = launch.argv
    assert argv[0] == "py" and launch.env["CUDA_VISIBLE_DEVICES"] == "0"
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.300"
    assert argv[argv.index("--enable-auto-tool-choice") : argv.index("--enable-auto-tool-choice") + 3] == [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ]
    assert argv[-2:] == ["--seed", "1"]


def test_pooling_runner_and_external_models() -> None:
    fleet = parse_fleet(
        "models:\n - name: e\n   source: {path: /e}\n   engine: {runner: pooling}\n"
        " - name: x\n   endpoints: [{url: 'http://h:1', auth: none}]\n"
    )
    specs = plan_replicas(fleet.models, fleet.defaults, 2)
    assert [s.model.name for s in specs] == ["e"]
    argv = build_launch(specs[0], "/e").argv
    assert "--runner" in argv and "--max-num-seqs" not in argv


def test_responses_store_and_runtime_lora_switches() -> None:
    fleet = parse_fleet(
        "models:\n - name: a\n   source: {path: /a}\n   engine: {responses_store: true, runtime_lora: true}\n"
        " - name: b\n   source: {path: /b}\n   engine: {lora_modules: {b-sql: /ad}}\n"
    )
    a, b = (build_launch(s, "/w") for s in plan_replicas(fleet.models, fleet.defaults, 2))
    assert a.env["VLLM_ENABLE_RESPONSES_API_STORE"] == "1"
    assert a.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert a.argv.count("--enable-lora") == 1 and "--lora-modules" not in a.argv
    assert "VLLM_ENABLE_RESPONSES_API_STORE" not in b.env and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in b.env
    assert b.argv.count("--enable-lora") == 1 and b.argv[b.argv.index("--lora-modules") + 1] == "b-sql=/ad"


def test_a_tensor_parallel_gpu_replica_sees_exactly_its_devices_with_multicast_off() -> None:
    model = parse_fleet(
        "models:\n - name: big\n   source: {path: /m}\n   engine: {tensor_parallel_size: 2}\n"
    ).models[0]
    spec = ReplicaSpec(model, 0, 9000, (1, 2), device_kind="gpu", gpu_memory_utilization=0.8)
    env = build_launch(spec, "/m").env
    assert env["CUDA_VISIBLE_DEVICES"] == "1,2"
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert "--tensor-parallel-size" in (argv := build_launch(spec, "/m").argv)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"


def test_media_domain_allow_list_reaches_vllm_argv() -> None:
    fleet = parse_fleet(
        "models:\n - name: m\n   source: {path: /m}\n"
        "   engine: {allowed_media_domains: [images.example.com, 10.0.0.7]}\n"
        " - name: n\n   source: {path: /n}\n"
    )
    m, n = (build_launch(s, "/w").argv for s in plan_replicas(fleet.models, fleet.defaults, 2))
    flag = m.index("--allowed-media-domains")
    assert m[flag + 1 : flag + 3] == ["images.example.com", "10.0.0.7"]
    # none named: deny-all, as compose and Kubernetes render (finding 9: bare metal had no allow-list)
    flag = n.index("--allowed-media-domains")
    assert n[flag + 1 : flag + 2] == [NO_MEDIA_DOMAIN]
    assert all(a.startswith("--") for a in n[flag + 2 :][:1])  # then a flag (or the end)


@pytest.mark.parametrize(
    "domain", ["https://images.example.com", "example.com/path", "", "-x.org", "Images.example.com"]
)
def test_media_domain_must_be_a_bare_host(domain: str) -> None:
    with pytest.raises(FleetError, match="allowed_media_domains"):
        parse_fleet(
            "models:\n - name: m\n   source: {path: /m}\n"
            f"   engine: {{allowed_media_domains: ['{domain}']}}\n"
        )


def test_migration_headroom_only_where_a_continuation_can_land() -> None:
    """Twice the concurrency for a migrating model of several replicas; else the concurrency."""
    fleet = parse_fleet(
        "models:\n - name: two\n   source: {path: /m}\n   replicas: 2\n   concurrency: 4\n"
        " - name: one\n   source: {path: /m}\n   concurrency: 4\n"
        " - name: fixed\n   source: {path: /m}\n   replicas: 2\n   concurrency: 4\n   migration: false\n"
    )
    specs = plan_replicas(fleet.models, fleet.defaults, 2)
    seqs = {s.model.name: (a := build_launch(s, "/w").argv)[a.index("--max-num-seqs") + 1] for s in specs}
    assert seqs == {"two": "8", "one": "4", "fixed": "4"}


def test_an_exact_model_publishes_kv_events_to_its_agent() -> None:
    fleet = parse_fleet(
        "models:\n - name: a\n   source: {path: /a}\n   kv_index: exact\n - name: b\n   source: {path: /b}\n"
    )
    a, b = plan_replicas(fleet.models, fleet.defaults, 2)
    argv = build_launch(a, "/w").argv
    conf = json.loads(argv[argv.index("--kv-events-config") + 1])
    assert conf["enable_kv_cache_events"] and conf["publisher"] == "zmq"
    assert conf["endpoint"] == f"ipc:///tmp/llmgw-kv-{a.port}.pub"
    assert conf["replay_endpoint"] == f"ipc:///tmp/llmgw-kv-{a.port}.replay"
    assert "--kv-events-config" not in build_launch(b, "/w").argv
