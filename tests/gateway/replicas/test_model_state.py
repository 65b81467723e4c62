"""A model's state as /v1/models, /ready and ``llmgw_model_state`` say it: awake while a replica takes
requests, waking while one starts, asleep while one is stopped until asked for, else unavailable."""

from __future__ import annotations

from gateway.replicas.table import MODEL_STATES, ReplicaTable
from llmgw_contract.registry import ReplicaRecord, ReplicaState


def state_with(*states: ReplicaState) -> str:
    table = ReplicaTable(["m"])
    recs = [ReplicaRecord(id=f"m-{i}", model="m", url=f"http://r{i}", state=s) for i, s in enumerate(states)]
    table.sync("m", recs)
    return table.pool("m").state


def test_each_mix_of_replica_states_names_one_model_state() -> None:
    assert state_with(ReplicaState.READY, ReplicaState.ASLEEP) == "awake"
    assert state_with(ReplicaState.STARTING, ReplicaState.ASLEEP) == "waking"
    assert state_with(ReplicaState.WAKING) == "waking"
    assert state_with(ReplicaState.ASLEEP) == "asleep"
    assert state_with(ReplicaState.FAILED) == "unavailable"
    assert state_with() == "unavailable"
    assert set(MODEL_STATES) == {"awake", "waking", "asleep", "unavailable"}
