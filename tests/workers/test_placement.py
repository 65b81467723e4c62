"""The one placement: the launcher, the planner and the compose renderer agree, tensor parallel included."""

from __future__ import annotations

from contract.fleet import Fleet
from tools.deploy.compose import ComposeOptions, plan
from workers.replica.launch import build_launch, plan_replicas
from workers.replica.placement import place_replicas, take


def fleet(device: str = "gpu") -> Fleet:
    return Fleet.model_validate(
        {
            "defaults": {"device": device},
            "models": [
                {"name": "gemma", "source": {"path": "/m/g"}, "replicas": 2},
                {"name": "llama", "source": {"path": "/m/l"}, "placement": {"devices": [2]}},
                {"name": "qwen2", "source": {"path": "/m/q"}, "engine": {"tensor_parallel_size": 2}},
                {"name": "remote", "endpoints": ["http://x"]},
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
