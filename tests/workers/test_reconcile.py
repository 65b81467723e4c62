"""Reconcile decisions, pure: fleet files against running replicas, no process and no Redis."""

from __future__ import annotations

from llmgw_contract.fleet import Fleet, parse_fleet
from llmgw_contract.registry import ReplicaState
from workers.converge.actions import (
    Action,
    PortLedger,
    Refusal,
    Replace,
    Running,
    Start,
    Stop,
    device_key,
    fingerprint,
    plan,
)
from workers.converge.headroom import GIB, Headroom, cpu_need_bytes, parse_meminfo
from workers.replica.launch import ReplicaSpec

BASE = """
defaults: {base_port: 8100}
models:
  - name: a
    source: {path: /a}
    replicas: 2
    placement: {devices: [0, 1]}
  - name: b
    source: {path: /b}
    replicas: 1
    placement: {devices: [1]}
"""


def fleet(text: str = BASE) -> Fleet:
    return parse_fleet(text)


def converge(f: Fleet, running: list[Running], n_devices: int = 2) -> list[Running]:
    """Apply every action as if it succeeded (what the executor does), until the plan is empty."""
    for _ in range(20):
        actions = plan(f, running, n_devices)
        if not actions:
            return running
        running = apply(running, actions)
    raise AssertionError("no convergence")


def apply(running: list[Running], actions: list[Action]) -> list[Running]:
    out = list(running)
    for a in actions:
        if isinstance(a, Start):
            out.append(Running(a.spec, a.slot))
        elif isinstance(a, Stop):
            out = [r for r in out if r.id != a.replica]
        else:
            out = [r for r in out if r.id != a.replica] + [Running(a.spec, a.slot)]
    return out


def ports(running: list[Running]) -> dict[str, int]:
    return {r.id: r.spec.port for r in running}


def test_from_nothing_starts_every_replica_on_consecutive_ports() -> None:
    actions = plan(fleet(), [], 2)
    assert [type(a) for a in actions] == [Start, Start, Start]
    specs = [a.spec for a in actions if isinstance(a, Start)]
    assert [(s.id, s.port, s.device) for s in specs] == [("a-0", 8100, 0), ("a-1", 8101, 1), ("b-0", 8102, 1)]


def test_a_converged_fleet_needs_nothing() -> None:
    running = converge(fleet(), [])
    assert plan(fleet(), running, 2) == []


def test_adding_a_model_moves_no_port() -> None:
    running = converge(fleet(), [])
    before = ports(running)
    grown = fleet(BASE.replace("models:\n", "models:\n  - name: new\n    source: {path: /n}\n", 1))
    actions = plan(grown, running, 2)
    assert len(actions) == 1 and isinstance(actions[0], Start)
    assert actions[0].spec.id == "new-0" and actions[0].spec.port == 8103
    after = ports(converge(grown, running))
    assert {k: after[k] for k in before} == before


def test_removing_a_model_stops_its_replicas_and_keeps_the_others() -> None:
    running = converge(fleet(), [])
    only_b = fleet(BASE.split("  - name: a")[0] + "  - name: b" + BASE.split("  - name: b")[1])
    actions = plan(only_b, running, 2)
    assert sorted((type(a).__name__, getattr(a, "replica", "")) for a in actions) == [
        ("Stop", "a-0"),
        ("Stop", "a-1"),
    ]
    assert all("no longer in the fleet" in a.reason for a in actions)


def test_scale_down_stops_the_highest_slot_and_scale_up_reuses_it() -> None:
    running = converge(fleet(), [])
    one = fleet(BASE.replace("replicas: 2", "replicas: 1"))
    actions = plan(one, running, 2)
    assert actions == [Stop("a-1", "surplus: a wants 1 replicas")]
    running = apply(running, actions)
    actions = plan(fleet(), running, 2)
    assert len(actions) == 1 and isinstance(actions[0], Start)
    assert (actions[0].spec.id, actions[0].spec.device, actions[0].spec.port) == ("a-1", 1, 8101)


def test_changed_engine_argument_replaces_one_replica_at_a_time_with_new_ids_and_ports() -> None:
    running = converge(fleet(), [])
    engine = "source: {path: /a}\n    engine: {max_model_len: 512}"
    changed = fleet(BASE.replace("source: {path: /a}", engine))
    first = plan(changed, running, 2)
    assert len(first) == 1 and isinstance(first[0], Replace)
    rep = first[0]
    assert rep.replica == "a-0" and rep.slot == 0 and "engine changed" in rep.reason
    assert rep.spec.id == "a-2" and rep.spec.port == 8103 and rep.spec.device == 0
    running = apply(running, first)
    second = plan(changed, running, 2)
    assert len(second) == 1 and isinstance(second[0], Replace) and second[0].replica == "a-1"
    assert second[0].spec.device == 1 and second[0].spec.port not in ports(running).values()
    running = apply(running, second)
    assert plan(changed, running, 2) == []
    assert ports(running)["b-0"] == 8102


def test_policy_or_queue_changes_replace_nothing() -> None:
    running = converge(fleet(), [])
    extra = "replicas: 1\n    policy: least_inflight\n    max_queue: 9\n"
    tuned = fleet(BASE.replace("replicas: 1\n", extra))
    assert plan(tuned, running, 2) == []


def test_placement_change_replaces_onto_the_new_device() -> None:
    running = converge(fleet(), [])
    moved = fleet(BASE.replace("placement: {devices: [1]}", "placement: {devices: [0]}"))
    actions = plan(moved, running, 2)
    assert len(actions) == 1 and isinstance(actions[0], Replace)
    assert actions[0].replica == "b-0" and actions[0].spec.device == 0 and "placement" in actions[0].reason


def test_a_refused_replace_is_not_tried_again() -> None:
    running = converge(fleet(), [])
    changed = fleet(BASE.replace("source: {path: /b}", "source: {path: /b2}"))
    model_b = changed.models[1]
    assert plan(changed, running, 2, refused=[Refusal("b-0", fingerprint(model_b))]) == []
    assert len(plan(changed, running, 2, refused=[Refusal("b-0", "other")])) == 1


def test_a_failed_replica_with_the_current_configuration_is_left_alone() -> None:
    running = converge(fleet(), [])
    failed = [Running(r.spec, r.slot, ReplicaState.FAILED) if r.id == "b-0" else r for r in running]
    assert plan(fleet(), failed, 2) == []


def test_unplaced_models_go_to_the_least_used_device() -> None:
    text = "models:\n - name: u\n   source: {path: /u}\n   replicas: 3\n"
    specs = [a.spec for a in plan(fleet(text), [], 2) if isinstance(a, Start)]
    assert [s.device for s in specs] == [0, 1, 0]


def test_port_ledger_skips_ports_in_use() -> None:
    ledger = PortLedger(8100, {8100, 8102})
    assert [ledger.allocate(), ledger.allocate(), ledger.allocate()] == [8101, 8103, 8104]
    taken_elsewhere = PortLedger(8100, {8100}, is_free=lambda p: p != 8101)
    assert taken_elsewhere.allocate() == 8102


def test_unmanaged_models_are_not_run() -> None:
    text = "models:\n - name: e\n   endpoints: [{url: 'http://x:1', auth: none}]\n"
    assert plan(fleet(text), [], 2) == []


def test_device_keys_serialise_each_gpu_and_all_cpus() -> None:
    assert device_key("gpu", 0) != device_key("gpu", 1)
    assert device_key("cpu", 0) == device_key("cpu", 1)


def test_running_view_names_its_model() -> None:
    spec = ReplicaSpec(fleet().models[0], 0, 8100, (0,))
    assert Running(spec, 0).model == "a" and Running(spec, 0).id == "a-0"


def test_meminfo_gives_available_bytes() -> None:
    text = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:    2048 kB\n"
    assert parse_meminfo(text) == 2048 * 1024
    assert parse_meminfo("MemTotal: 1 kB\n") is None


def test_headroom_fits_only_a_known_reading_that_covers_the_need() -> None:
    need = cpu_need_bytes(1, weights=GIB, overhead=GIB)
    assert need == 3 * GIB
    assert Headroom(3 * GIB, need).fits and not Headroom(3 * GIB - 1, need).fits
    assert not Headroom(None, need).fits and "unknown" in Headroom(None, need).describe()


def test_retired_ids_and_busy_ports_are_not_handed_out_again() -> None:
    running = converge(fleet(), [])
    running = apply(running, plan(fleet(BASE.replace("replicas: 2", "replicas: 1")), running, 2))
    again = plan(fleet(), running, 2, retired=["a-1"], is_free=lambda p: p != 8101)
    assert len(again) == 1 and isinstance(again[0], Start)
    assert (again[0].spec.id, again[0].slot, again[0].spec.port) == ("a-2", 1, 8103)


SCALED = """
defaults: {base_port: 8100}
models:
  - name: s
    source: {path: /s}
    replicas: 1
    activation: on_demand
    scaling: {min_replicas: 0, max_replicas: 3, target_per_replica: 2}
"""


def test_the_scalers_count_starts_in_the_lowest_free_slot_and_keeps_the_running_ones() -> None:
    f = fleet(SCALED)
    one = converge(f, [])
    assert [(r.id, r.slot) for r in one] == [("s-0", 0)]
    three = apply(one, plan(f, one, 1, counts={"s": 3}))
    assert sorted((r.id, r.slot) for r in three) == [("s-0", 0), ("s-1", 1), ("s-2", 2)]
    after_idlest_went = [r for r in three if r.id != "s-0"]  # the scaler retired slot 0's replica
    assert plan(f, after_idlest_went, 1, counts={"s": 2}) == []
    assert plan(f, after_idlest_went, 1, counts={"s": 9}) != []  # clamped to the maximum: one start
    assert [a.slot for a in plan(f, after_idlest_went, 1, counts={"s": 9}) if isinstance(a, Start)] == [0]
    assert plan(f, [], 1, counts={"s": 0}) == []
