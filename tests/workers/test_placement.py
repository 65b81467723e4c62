"""The one placement: the launcher, the planner and the compose renderer agree, tensor parallel included."""

from __future__ import annotations

from llmgw_contract.fleet import Fleet
from llmgw_tools.deploy.compose import ComposeOptions, plan
from workers.replica.launch import build_launch, plan_replicas
from workers.replica.placement import place_replicas, placement_problems, take


def fleet(device: str = "gpu") -> Fleet:
    return Fleet.model_validate(
        {
            "defaults": {"device": device},
            "models": [
                {"name": "gemma", "source": {"path": "/m/g"}, "replicas": 2},
                {"name": "llama", "source": {"path": "/m/l"}, "placement": {"devices": [2]}},
                {"name": "qwen2", "source": {"path": "/m/q"}, "engine": {"tensor_parallel_size": 2}},
                {"name": "remote", "endpoints": [{"url": "http://x", "auth": "none"}]},
            ],
        }
    )


def test_unplaced_replicas_spread_tp_devices_each_and_placed_ones_keep_their_devices() -> None:
    assert place_replicas(fleet().models, [0, 1, 2]) == {
        ("gemma", 0): (0,),
        ("gemma", 1): (1,),
        ("llama", 0): (2,),
        ("qwen2", 0): (2, 0),
    }


def test_take_wraps_around_and_an_empty_pool_gives_nothing() -> None:
    assert take([4, 5, 6], 2, 2) == (6, 4)
    assert take([], 0, 2) == ()


def test_launcher_gives_a_tensor_parallel_replica_all_its_gpus() -> None:
    f = fleet()
    specs = {s.id: s for s in plan_replicas(f.models, f.defaults, 3)}
    assert {k: s.devices for k, s in specs.items()} == {
        "gemma-0": (0,),
        "gemma-1": (1,),
        "llama-0": (2,),
        "qwen2-0": (2, 0),
    }
    assert build_launch(specs["qwen2-0"], "/m/q").env["CUDA_VISIBLE_DEVICES"] == "2,0"
    assert [s.port for s in specs.values()] == [8100, 8101, 8102, 8103]


def test_compose_places_like_the_launcher() -> None:
    f = fleet()
    rendered = {s.id: s.devices for s in plan(f, ComposeOptions())}
    launched = {s.id: s.devices for s in plan_replicas(f.models, f.defaults, 3)}
    assert rendered == launched


def test_cpu_replica_is_pinned_to_its_core() -> None:
    f = fleet("cpu")
    spec = plan_replicas(f.models, f.defaults, 2)[1]
    launch = build_launch(spec, "/m/g")
    assert launch.argv[:3] == ["taskset", "-c", "1"]
    assert launch.env["VLLM_CPU_OMP_THREADS_BIND"] == "1"


def test_a_fleet_the_host_can_place_has_no_problems() -> None:
    assert placement_problems(fleet().models, [0, 1, 2]) == []


def test_a_replica_on_a_missing_device_is_named_with_the_devices() -> None:
    assert placement_problems(fleet().models, [0, 1]) == [
        "model 'llama' replica 0: placement.devices puts it on gpu 2 but the host has 2 gpu(s): 0, 1 "
        "(no 2). Change placement.devices."
    ]


def test_a_tensor_parallel_replica_wider_than_the_host_is_named_with_the_arithmetic() -> None:
    one_gpu = [m for m in fleet().models if m.name in ("gemma", "qwen2")]
    assert placement_problems(one_gpu, [0]) == [
        "model 'qwen2' replica 0: tensor_parallel_size 2 needs 2 distinct devices but the host has 1 "
        "gpu(s): 0. Change tensor_parallel_size or run it on a larger host."
    ]
