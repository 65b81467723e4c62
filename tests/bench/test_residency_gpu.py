"""bench/residency/gpu.py's pure parts: a model's state on the GPU from the registry and the supervisor's
log, the ledger's summary, and the recipe's fleet (its variants and the dry run's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bench.residency.gpu import Levels, dry_fleet, fleet_for, ledger_summary
from llmgw_contract.fleet import parse_fleet
from llmgw_contract.registry import ReplicaRecord, ReplicaState

FLEET = Path(__file__).resolve().parents[2] / "bench/gpu/fleet-residency.yaml"
LOG = """\
2026-12-05 23:43:47,700 INFO llmgw.ondemand replica=m1-0 vllm sleep level 1 in 9.40 s
2026-12-05 23:43:48,100 INFO llmgw.ondemand replica=m1-0 asleep (level 1)
2026-12-05 23:44:29,000 INFO llmgw.ondemand replica=m4-0 vllm sleep level 2 in 0.05 s
2026-12-05 23:44:30,000 INFO llmgw.ondemand replica=m5-0 asleep (stopped)
2026-12-05 23:44:31,000 INFO llmgw.ondemand replica=m6-0 vllm sleep level 1 in 0.30 s
2026-12-05 23:44:32,000 WARNING llmgw.ondemand \
replica=m6-0 keeps 40000 of 44207 MiB asleep: stopped instead, from now on
"""


def rec(model: str, state: ReplicaState) -> ReplicaRecord:
    return ReplicaRecord(id=f"{model}-0", model=model, url="http://127.0.0.1:1", state=state)


def test_each_model_holds_what_the_registry_and_its_last_sleep_line_say(tmp_path: Path) -> None:
    log = tmp_path / "supervisor.log"
    log.write_text(LOG + "2026-12-05 23:44:33,000 INFO llmgw.ondemand replica=m7-0 vllm sleep lev")  # cut
    levels = Levels(log)
    records = [
        rec("m0", ReplicaState.READY), rec("m1", ReplicaState.ASLEEP), rec("m2", ReplicaState.DRAINING),
        rec("m3", ReplicaState.ASLEEP), rec("m4", ReplicaState.WAKING), rec("m5", ReplicaState.STARTING),
        rec("m6", ReplicaState.ASLEEP), rec("m7", ReplicaState.FAILED),
    ]  # fmt: skip
    assert levels.held(records) == {
        "m0": "awake", "m1": "asleep1", "m2": "awake", "m3": "stopped", "m4": "asleep2", "m5": "stopped",
        "m6": "stopped", "m7": "failed",
    }  # fmt: skip
    with log.open("a") as f:  # the cut line ends: read from where the last read stopped
        f.write("el 1 in 0.3 s\n")
    assert levels.held([rec("m7", ReplicaState.ASLEEP)]) == {"m7": "asleep1"}


def test_the_ledger_summary_tells_settled_readings_and_those_after_each_replicas_first() -> None:
    rows: list[dict[str, Any]] = [
        {"replica": "a", "changing": "none", "off_pct_of_card": 1.5},  # a's first: the planner's estimate
        {"replica": "b", "changing": "a", "off_pct_of_card": -30.0},  # not settled
        {"replica": "a", "changing": "none", "off_pct_of_card": -0.4},
        {"replica": "b", "changing": "none", "off_pct_of_card": 0.9},
        {"replica": "c", "changing": "none"},  # no prediction
    ]
    got = ledger_summary(rows)
    assert got["every"] == {"n": 4, "max_pct": 30.0, "within_1pct": 2}
    assert got["settled"] == {"n": 3, "max_pct": 1.5, "within_1pct": 2}
    assert got["settled_after_first"] == {"n": 2, "max_pct": 0.9, "within_1pct": 2}


def test_the_recipes_fleet_and_its_variants_are_valid_fleets() -> None:
    text = FLEET.read_text()
    real = parse_fleet(fleet_for(text))
    assert [m.name for m in real.models] == [f"m{i}" for i in range(8)]
    assert all(m.on_demand and m.engine.enforce_eager and m.engine.load_format is None for m in real.models)
    assert real.defaults.autopilot
    dummy = parse_fleet(fleet_for(text, "dummy", "today"))
    assert {(m.engine.load_format, str(m.source.path if m.source else "")) for m in dummy.models} == {
        ("dummy", "/tmp/gpu-models/llama-2-7b")
    }
    assert not dummy.defaults.autopilot
    dry = yaml.safe_load(dry_fleet(fleet_for(text), 0.1, "/x/models", 18700, 25.0))
    assert dry["defaults"]["base_port"] == 18700
    m = dry["models"][0]
    assert m["source"]["path"] == "/x/models/llama-2-7b-real"
    assert m["engine"]["extra_args"] == ["--profile", "h200", "--time-scale", "0.1", "--delay-ms", "25.000"]
    assert m["idle_timeout_s"] == 2.5
    parse_fleet(yaml.safe_dump(dry))
