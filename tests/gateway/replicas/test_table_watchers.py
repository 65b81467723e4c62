"""An endpoint's watchers (requests waiting for its answer) are told once it leaves the registry or is
newly ejected; a replica that stays, or is ejected again, tells nobody."""

from __future__ import annotations

from contract.registry import ReplicaRecord
from gateway.replicas.ejection import Ejection
from gateway.replicas.table import ReplicaTable


def test_leaving_and_ejection_call_the_watchers() -> None:
    table = ReplicaTable(["m"])
    a, b = (ReplicaRecord(id=i, model="m", url=f"http://{i}") for i in ("m-0", "m-1"))
    table.sync("m", [a, b])
    first, second = table.pool("m").endpoints
    told: list[str] = []
    first.watchers.add(lambda: told.append("m-0"))
    second.watchers.add(lambda: told.append("m-1"))
    table.sync("m", [b])  # m-0 left; m-1 stays
    assert told == ["m-0"]
    ejection = Ejection()
    assert ejection.fail(second, 0.0) and not ejection.fail(second, 1.0)  # told once, when newly ejected
    assert told == ["m-0", "m-1"]
