"""An endpoint's watchers (requests waiting for its answer) are told only on evidence about their work:
the registry says its process is gone (it left, restarted as a new instance, or was marked failed), or
it failed ``lost_after`` health probes in a row. An ejection (one failed probe, a connection error of
another request, a run of 5xx) takes it out of new picks and tells nobody."""

from __future__ import annotations

from gateway.replicas.ejection import Ejection
from gateway.replicas.table import Endpoint, ReplicaTable
from llmgw_contract.registry import ReplicaRecord, ReplicaState


def records(*ids: str, instance: str = "a") -> list[ReplicaRecord]:
    return [ReplicaRecord(id=i, model="m", url=f"http://{i}", instance=instance) for i in ids]


def watched(ep: Endpoint, told: list[str]) -> None:
    ep.watchers.add(lambda: told.append(ep.id))


def test_leaving_the_registry_tells_the_watchers_and_marks_the_process_gone() -> None:
    table = ReplicaTable(["m"])
    table.sync("m", records("m-0", "m-1"))
    first, second = table.pool("m").endpoints
    told: list[str] = []
    watched(first, told)
    watched(second, told)
    table.sync("m", records("m-1"))  # m-0 left; m-1 stays
    assert told == ["m-0"] and first.process_gone and not second.process_gone


def test_a_new_instance_or_a_failed_record_is_a_gone_process() -> None:
    table = ReplicaTable(["m"])
    table.sync("m", records("m-0", "m-1"))
    first, second = table.pool("m").endpoints
    told: list[str] = []
    watched(first, told)
    watched(second, told)
    restarted = records("m-0", instance="b")[0]
    failed = records("m-1")[0].model_copy(update={"state": ReplicaState.FAILED})
    table.sync("m", [restarted, failed])
    assert sorted(told) == ["m-0", "m-1"] and first.process_gone and second.process_gone
    table.sync("m", [restarted, failed])  # still failed: told once
    assert len(told) == 2


def test_an_ejection_tells_nobody() -> None:
    ep = Endpoint(records("m-0")[0])
    told: list[str] = []
    watched(ep, told)
    ejection = Ejection(after=2)
    assert ejection.fail(ep, 0.0) and not ejection.fail(ep, 1.0)  # a connection error, another
    assert not ejection.strike(ep, 2.0) and not ejection.strike(ep, 3.0)  # a run of 5xx (already out)
    assert not ep.available and told == []


def test_a_run_of_failed_probes_tells_the_watchers_once() -> None:
    ep = Endpoint(records("m-0")[0])
    told: list[str] = []
    watched(ep, told)
    ejection = Ejection(lost_after=3)
    assert ejection.probe_failed(ep, 0.0) == (True, False)  # out of new picks; in flight: nothing
    assert ejection.probe_failed(ep, 1.0) == (False, False) and told == []
    assert ejection.probe_failed(ep, 2.0) == (False, True) and told == ["m-0"]
    assert ejection.probe_failed(ep, 3.0) == (False, False) and told == ["m-0"]
    ejection.succeed(ep)  # it answered: back in picks, the run forgotten
    assert ep.available and ep.probe_failures == 0 and not ep.process_gone
