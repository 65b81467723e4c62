"""The one fleet-file reader: the workers and the gateways accept and refuse the same files."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.routing import POLICIES
from llmgw_contract.fleet import FleetError
from llmgw_contract.fleet_file import ROUTING_POLICIES, FleetFile, FleetWatch, read_fleet

FLEET = "models:\n - name: a\n   source: {{path: /a}}\n   policy: {policy}\n"


def test_the_contract_knows_exactly_the_gateways_policies() -> None:
    assert set(POLICIES) == ROUTING_POLICIES


def test_an_unknown_policy_is_refused_with_its_field(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET.format(policy="fastest"))
    with pytest.raises(FleetError, match=r"models\.0\.policy: unknown routing policy 'fastest'"):
        read_fleet(path)
    with pytest.raises(FleetError, match="unknown routing policy"):
        FleetWatch(path).read()


def test_a_change_on_disk_is_seen_once(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET.format(policy="round_robin"))
    file = FleetFile(path)
    assert file.changed()
    assert file.read().models[0].policy == "round_robin"
    assert not file.changed()
    path.write_text(FLEET.format(policy="least_inflight") + "\n")
    assert file.changed()
    assert file.read().models[0].policy == "least_inflight"
    path.unlink()
    assert not file.changed()  # a missing file is no change: the running fleet keeps serving
