"""The lean cluster client follows an ``-ASK`` redirection (a slot being migrated) to a node it has no
connection to yet: ``ASKING`` and the call reach that node together, so it answers the call at once
instead of bouncing it back with ``-MOVED``. Against the shared real Redis Cluster: one slot is put in
MIGRATING/IMPORTING state between two masters and its test key MIGRATEd; the slot is made stable and given
back to its owner on every master at the end, so later tests see the cluster as it was (a slot left
IMPORTING broke the next failover test: the importer never took the new owner's claim)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from gateway.admission.redis_cluster_wire import ClusterPipelined
from gateway.admission.redis_wire import Endpoint
from llmgw_tools.stack.ports import HOST
from llmgw_tools.stack.redis_topology import Topology, cli
from tests.conftest import Topologies


@dataclass
class Migrating:
    key: str
    slot: int
    source: int  # the port of the master that owns the slot and is migrating it
    target: int  # the port of the master importing it, which holds the key now


def masters(port: int) -> dict[int, str]:
    """Port -> node id of every master the node on ``port`` knows."""
    found = {}
    for line in cli(port, "CLUSTER", "NODES").splitlines():
        parts = line.split()
        if "master" in parts[2] and "fail" not in parts[2]:
            found[int(parts[1].split("@")[0].rsplit(":", 1)[1])] = parts[0]
    return found


def moved_count(port: int) -> int:
    """How many ``-MOVED`` replies the node on ``port`` has given (its INFO errorstats)."""
    for line in cli(port, "INFO", "errorstats").splitlines():
        if line.startswith("errorstat_MOVED:count="):
            return int(line.split("=", 1)[1])
    return 0


@pytest.fixture
def cluster(topologies: Topologies) -> Topology:
    """The shared Redis Cluster (test_on_valkey.py's: its Valkey cluster)."""
    return topologies.get("cluster")


@pytest.fixture
def migrating(cluster: Topology) -> Iterator[Migrating]:
    key = f"{{ask{uuid.uuid4().hex[:8]}}}:k"
    source = cluster.master_port(key)
    ids = masters(source)
    target = next(p for p in ids if p != source)
    slot = int(cli(source, "CLUSTER", "KEYSLOT", key).strip())
    assert cli(source, "SET", key, "moved-away").strip() == "OK"
    assert cli(target, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", ids[source]).strip() == "OK"
    assert cli(source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", ids[target]).strip() == "OK"
    try:
        assert cli(source, "MIGRATE", HOST, str(target), key, "0", "5000").strip() == "OK"
        yield Migrating(key, slot, source, target)
    finally:
        on_target = redis.Redis(HOST, target, single_connection_client=True)
        try:
            on_target.execute_command("ASKING")  # type: ignore[no-untyped-call]
            on_target.delete(key)
        finally:
            on_target.close()
        for port in ids:  # STABLE: ``SETSLOT NODE <another node>`` leaves the importer's IMPORTING state
            assert cli(port, "CLUSTER", "SETSLOT", str(slot), "STABLE").strip() == "OK"
            assert cli(port, "CLUSTER", "SETSLOT", str(slot), "NODE", ids[source]).strip() == "OK"
        assert {port: open_slots(port) for port in ids} == {port: [] for port in ids}


def open_slots(port: int) -> list[str]:
    """The slots the node on ``port`` has in MIGRATING or IMPORTING state (``[slot->-id]``, ``[slot-<-id]``
    in its own CLUSTER NODES line). One left IMPORTING keeps that node's ``cluster_state:fail`` after a
    later failover moves the slot's owner: it takes no slot update from gossip for a slot it imports."""
    mine = next(line for line in cli(port, "CLUSTER", "NODES").splitlines() if "myself" in line)
    return [part for part in mine.split()[8:] if part.startswith("[")]


async def test_ask_to_a_node_not_connected_yet(migrating: Migrating) -> None:
    lean = ClusterPipelined([Endpoint(HOST, migrating.source)], 2.0)
    try:
        assert await lean.call("GET", migrating.key) == b"moved-away"  # opens the seed (source) only
        assert set(lean.links) == {f"{HOST}:{migrating.source}", f"{HOST}:{migrating.target}"}
        assert migrating.slot not in lean.slots  # ASK is not recorded: the slot is still the source's
    finally:
        lean.close()


async def test_asking_reaches_the_new_node_with_the_call(migrating: Migrating) -> None:
    """The importing node answers the first call it gets (no -MOVED back to the source)."""
    before = moved_count(migrating.target)
    lean = ClusterPipelined([Endpoint(HOST, migrating.source)], 2.0)
    try:
        assert await lean.call("SET", migrating.key, "set-there") == "OK"
        assert await lean.call("GET", migrating.key) == b"set-there"
    finally:
        lean.close()
    assert moved_count(migrating.target) == before
