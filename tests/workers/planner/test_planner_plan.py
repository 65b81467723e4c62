"""plan_fleet: budgets per replica, the device check, the target split, and the explanation."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from llmgw_contract.fleet import Fleet, Model
from workers.planner import memory as mem
from workers.planner.plan import plan_fleet
from workers.planner.report import render

H200 = 143_771 * mem.MIB
Loader = Callable[[Model], Mapping[str, Any]]
Entry = Callable[..., dict[str, Any]]
MakeFleet = Callable[..., Fleet]


# The H200 measurements ran with vLLM's default max_num_seqs (1024); the launcher would pass the model's
# concurrency (8 by default) instead, so the measured fleet says 1024 itself.
MEASURED_ENGINE = {"extra_args": ["--max-num-seqs", "1024"]}


def _three(entry: Entry, budget: float | None = None, **extra: Any) -> list[dict[str, Any]]:
    b = {"budget": {"gpu_memory_utilization": budget}} if budget is not None else {}
    extra.setdefault("engine", MEASURED_ENGINE)
    return [entry(k, k, **b, **extra) for k in ("llama", "qwen2", "gemma")]


def test_the_measured_three_at_030_fit_one_h200(entry: Entry, make_fleet: MakeFleet, loader: Loader) -> None:
    plan = plan_fleet(make_fleet(*_three(entry, 0.30)), {0: H200}, loader)
    assert plan.fits, render(plan)
    measured = {"llama": 57_696, "qwen2": 492_464, "gemma": 56_752}
    for r in plan.replicas:
        assert r.gpu_memory_utilization == 0.30 and r.budget_from == "fleet"
        assert r.kv_tokens == pytest.approx(measured[r.model], rel=0.03)
        assert r.reserve_bytes == mem.DEFAULT_RESERVE_BYTES
    (dev,) = plan.devices
    assert dev.used_bytes == 3 * (int(0.30 * H200) + 2 * mem.GIB)
    assert dev.fraction < 1
    assert any("above the target" in n for n in plan.notes)


def test_an_oversubscribed_device_is_refused(entry: Entry, make_fleet: MakeFleet, loader: Loader) -> None:
    plan = plan_fleet(make_fleet(*_three(entry, 0.33)), {0: H200}, loader)
    assert not plan.fits
    (problem,) = plan.problems
    assert "device 0 is oversubscribed" in problem
    assert "0.330 + 0.330 + 0.330 = 0.990" in problem
    assert "3 reserves" in problem and "> 140.40 GiB" in problem
    max_sum = mem.floor_step((H200 - 6 * mem.GIB) / H200)
    assert f"sum <= {max_sum:.3f}" in problem and "placement.devices" in problem
    assert "REFUSED" in render(plan) and "does NOT fit" in render(plan)


def test_the_target_is_split_into_budgets(entry: Entry, make_fleet: MakeFleet, loader: Loader) -> None:
    plan = plan_fleet(make_fleet(*_three(entry)), {0: H200}, loader, target=0.85)
    assert plan.fits, render(plan)
    (dev,) = plan.devices
    assert dev.fraction == pytest.approx(0.85, abs=3 * mem.BUDGET_STEP)
    assert dev.fraction <= 0.85
    multiples = []
    for r in plan.replicas:
        assert r.budget_from == "planned"
        assert r.gpu_memory_utilization >= r.min_budget
        assert r.kv_tokens >= r.kv_tokens_wanted
        multiples.append(r.kv_tokens / r.kv_tokens_wanted)
    assert max(multiples) / min(multiples) == pytest.approx(1, abs=0.02)


def test_min_budget_covers_weights_other_and_asked_kv(
    entry: Entry, make_fleet: MakeFleet, loader: Loader
) -> None:
    plan = plan_fleet(make_fleet(entry("llama", "llama", concurrency=8)), {0: H200}, loader)
    r = plan.replica("llama", 0)
    need = r.weight_bytes + r.other_bytes + 8 * 4096 * 524_288
    assert r.min_budget == mem.ceil_step(need / H200)
    assert r.start_budget < r.min_budget
    assert r.backoff_floor == max(r.floor, r.start_budget)


def test_a_target_too_small_for_the_asked_kv_is_refused(
    entry: Entry, make_fleet: MakeFleet, loader: Loader
) -> None:
    plan = plan_fleet(make_fleet(*_three(entry, concurrency=20)), {0: H200}, loader, target=0.85)
    assert not plan.fits
    (problem,) = plan.problems
    assert problem.startswith("device 0: the target 0.850 cannot hold llama#0, qwen2#0, gemma#0")
    needs = sum(r.min_budget for r in plan.replicas) + 3 * mem.DEFAULT_RESERVE_BYTES / H200
    assert f"= {needs:.3f} of the card" in problem
    assert f"raise --target to >= {mem.ceil_step(needs):.3f}" in problem
    assert "lower max_model_len or concurrency" in problem
    assert all(r.gpu_memory_utilization == r.min_budget for r in plan.replicas)


def test_asked_kv_beyond_the_card_is_refused(entry: Entry, make_fleet: MakeFleet, loader: Loader) -> None:
    plan = plan_fleet(make_fleet(*_three(entry, concurrency=32)), {0: H200}, loader, target=1.0)
    (problem,) = plan.problems
    assert "(more than the card)" in problem and "raise --target" not in problem


def test_a_fleet_budget_too_small_for_the_asked_kv_is_refused(
    entry: Entry, make_fleet: MakeFleet, loader: Loader
) -> None:
    fleet = make_fleet(entry("llama", "llama", concurrency=8, budget={"gpu_memory_utilization": 0.15}))
    plan = plan_fleet(fleet, {0: H200}, loader)
    (problem,) = plan.problems
    r = plan.replica("llama", 0)
    assert "model 'llama' replica 0 (device 0): budget 0.150" in problem
    assert f"raise gpu_memory_utilization to >= {r.min_budget:.3f}" in problem
    assert "32,768" in problem


def test_fixed_and_planned_budgets_share_a_device(
    entry: Entry, make_fleet: MakeFleet, loader: Loader
) -> None:
    fleet = make_fleet(
        entry("llama", "llama", budget={"gpu_memory_utilization": 0.40}), entry("qwen2", "qwen2")
    )
    plan = plan_fleet(fleet, {0: H200}, loader, target=0.80)
    assert plan.fits, render(plan)
    assert plan.replica("llama", 0).gpu_memory_utilization == 0.40
    assert plan.devices[0].fraction == pytest.approx(0.80, abs=0.002)


def test_replicas_follow_placement_and_unknown_devices_are_refused(
    entry: Entry, make_fleet: MakeFleet, loader: Loader
) -> None:
    fleet = make_fleet(entry("gemma", "gemma", replicas=2, placement={"devices": [0, 1]}))
    plan = plan_fleet(fleet, {0: H200, 1: H200}, loader)
    assert [r.devices for r in plan.replicas] == [(0,), (1,)]
    assert all(len(d.processes) == 1 for d in plan.devices)
    bad = plan_fleet(fleet, {0: H200}, loader)
    assert any("placed on device [1]" in p and "known devices are 0" in p for p in bad.problems)


def test_tensor_parallel_halves_weights_per_rank(entry: Entry, make_fleet: MakeFleet, loader: Loader) -> None:
    one = plan_fleet(make_fleet(entry("qwen2", "qwen2")), {0: H200}, loader).replica("qwen2", 0)
    fleet = make_fleet(entry("qwen2", "qwen2", engine={"tensor_parallel_size": 2}))
    plan = plan_fleet(fleet, {0: H200, 1: H200}, loader)
    two = plan.replica("qwen2", 0)
    assert two.devices == (0, 1)
    assert two.weight_bytes == pytest.approx(one.weight_bytes / 2, abs=1)
    assert all(len(d.processes) == 1 for d in plan.devices)


def test_engine_flags_change_kv_dtype_and_sampler_rows(
    entry: Entry, make_fleet: MakeFleet, loader: Loader
) -> None:
    base = plan_fleet(make_fleet(entry("gemma", "gemma")), {0: H200}, loader)
    args = ["--kv-cache-dtype", "fp8", "--max-num-seqs=256"]
    tuned = plan_fleet(make_fleet(entry("gemma", "gemma", engine={"extra_args": args})), {0: H200}, loader)
    assert tuned.models[0].kv_bytes_per_token * 2 == base.models[0].kv_bytes_per_token
    # concurrency 8 (the default) becomes --max-num-seqs 8; the flag in extra_args wins with 256
    assert tuned.replicas[0].other_bytes - base.replicas[0].other_bytes == (256 - 8) * 256_000 * 4


def test_endpoint_models_are_skipped_and_loader_errors_named(
    entry: Entry, make_fleet: MakeFleet, loader: Loader
) -> None:
    def failing(model: Model) -> Mapping[str, Any]:
        if model.name == "broken":
            raise FileNotFoundError("no config.json for model 'broken'")
        return loader(model)

    fleet = make_fleet(
        entry("llama", "llama"),
        entry("broken", "llama"),
        {"name": "remote", "endpoints": [{"url": "http://elsewhere:8000", "auth": "none"}]},
    )
    plan = plan_fleet(fleet, {0: H200}, failing)
    assert [r.model for r in plan.replicas] == ["llama"]
    assert plan.problems == ("model 'broken': no config.json for model 'broken'",)
    assert any("'remote' is served elsewhere" in n for n in plan.notes)


def test_explain_shows_the_arithmetic(entry: Entry, make_fleet: MakeFleet, loader: Loader) -> None:
    text = render(plan_fleet(make_fleet(*_three(entry, 0.30)), {0: H200}, loader))
    assert "2 x 28 layers x 4 kv heads x 128 head_dim x 2 B (bfloat16) = 57,344 B" in text
    assert "1004 MiB + 1024 seqs x 256,000 vocab x 4 B" in text
    assert "(2 + 8/16)" in text and "no term for the asked KV cache" in text
    assert "Verdict: the fleet fits." in text


def test_bad_target_is_rejected(entry: Entry, make_fleet: MakeFleet, loader: Loader) -> None:
    with pytest.raises(ValueError, match="target"):
        plan_fleet(make_fleet(entry("llama", "llama")), {0: H200}, loader, target=1.5)


def test_max_num_seqs_is_what_the_launcher_passes(
    entry: Entry, make_fleet: MakeFleet, loader: Loader
) -> None:
    """concurrency becomes --max-num-seqs (a smaller sampler warm-up), unless extra_args say otherwise."""
    default, flagged = (
        plan_fleet(make_fleet(entry("m", "llama", concurrency=16, **e)), {0: H200}, loader).replicas[0]
        for e in ({}, {"engine": MEASURED_ENGINE})
    )
    assert default.kv_tokens > flagged.kv_tokens  # 16 logits rows reserved instead of 1024
