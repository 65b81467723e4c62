"""The pure decisions of GPU sleep mode: the level (1 while the weights fit in the host-RAM budget beside
the other level-1 sleepers, else 2, else stopped for weights that cannot be reloaded), when a measured
sleep keeps too much to be worth it, and the GPU ledger (predicted card use, room for a wake)."""

from __future__ import annotations

from llmgw_contract.fleet import parse_fleet
from workers.ondemand.ledger import UNMEASURED_ASLEEP_BYTES, DeviceBook, Slot
from workers.ondemand.sleepers.level import choose_level, keeps_most
from workers.replica.launch import build_launch, plan_replicas

GIB = 1 << 30
W = 13 * GIB  # a 7B model's bf16 weights


def test_auto_takes_level_1_while_the_weights_fit_beside_the_other_level_1_sleepers() -> None:
    assert choose_level("auto", W, 40 * GIB, 0) == 1
    assert choose_level("auto", W, 36 * GIB, 26 * GIB) == 2  # a third 13 GiB model does not fit in 36
    assert choose_level("auto", W, 0, 0) == 2  # no host RAM budget: level 2
    assert choose_level("auto", W, 0, 0, reloadable=False) == 0  # dummy weights cannot reload: stop


def test_an_explicit_level_is_kept() -> None:
    assert choose_level(1, W, 0, 100 * GIB) == 1
    assert choose_level(2, W, 100 * GIB, 0) == 2


def test_a_sleep_that_keeps_half_or_more_is_not_worth_it() -> None:
    assert keeps_most(2 * GIB, 3 * GIB)  # a small embedding model: mostly context, not weights
    assert not keeps_most(int(1.6 * GIB), 63 * GIB)  # a 7B chat model at 0.42 of an H200
    assert not keeps_most(0, 0)


def slots(**holding: str) -> list[Slot]:
    return [
        Slot(r, r, h, 60 * GIB, last_used=i, busy=False)  # type: ignore[arg-type]
        for i, (r, h) in enumerate(holding.items())
    ]


def test_the_ledger_predicts_the_card_from_measurements_and_the_estimate_until_measured() -> None:
    book = DeviceBook(baseline=GIB)
    s = slots(a="awake", b="asleep", c="stopped")
    assert book.predicted_used(s) == GIB + 60 * GIB + UNMEASURED_ASLEEP_BYTES
    book.record("a", "awake", 62 * GIB, card_used=64 * GIB, ours=63 * GIB)
    book.record("b", "asleep", 2 * GIB, card_used=64 * GIB, ours=63 * GIB + GIB)
    assert book.predicted_used(s) == 62 * GIB + 2 * GIB
    assert book.predicted_used(s, {"c": "awake"}) == 64 * GIB + 60 * GIB


def test_a_wake_that_does_not_fit_puts_the_least_recently_used_idle_one_to_sleep_in_place() -> None:
    book = DeviceBook(awake={"a": 62 * GIB, "b": 62 * GIB, "c": 62 * GIB}, asleep={"c": 2 * GIB})
    s = slots(a="awake", b="awake", c="asleep")
    room = book.room(s, s[2], capacity=140 * GIB)
    assert room.evict == ("a",)  # 60 GiB back from a (62 awake, 2 kept asleep) makes c's 60 fit
    busy = [Slot("a", "a", "awake", 0, busy=True), *s[1:]]
    assert book.room(busy, busy[2], capacity=140 * GIB).evict == ("b",)
    assert book.room(s, s[2], capacity=200 * GIB).evict == ()


def test_an_on_demand_model_on_a_gpu_is_launched_with_sleep_mode_and_the_dev_server() -> None:
    fleet = parse_fleet(
        "defaults: {device: gpu}\nmodels:\n"
        " - {name: od, source: {path: /m}, activation: on_demand}\n"
        " - {name: always, source: {path: /m}}\n"
    )
    od, always = plan_replicas(fleet.models, fleet.defaults, 1)
    assert "--enable-sleep-mode" in build_launch(od, "/m").argv
    assert build_launch(od, "/m").env["VLLM_SERVER_DEV_MODE"] == "1"
    assert "--enable-sleep-mode" not in build_launch(always, "/m").argv
    assert "VLLM_SERVER_DEV_MODE" not in build_launch(always, "/m").env
    cpu = parse_fleet("models:\n - {name: od, source: {path: /m}, activation: on_demand}\n")
    (spec,) = plan_replicas(cpu.models, cpu.defaults, 1)
    assert "--enable-sleep-mode" not in build_launch(spec, "/m").argv  # vLLM's CPU build has no sleep mode
