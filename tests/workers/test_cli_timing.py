"""The supervisor's drain timing from its command line (``--drain-settle``, ``--drain-grace``)."""

from __future__ import annotations

from llmgw_contract.registry import RegistryTiming
from workers.cli import parse_args, registry_timing


def test_the_drain_settle_and_grace_come_from_the_command_line() -> None:
    base = ["--fleet", "fleet.yaml"]
    assert registry_timing(parse_args(base)) == RegistryTiming()
    timing = registry_timing(parse_args([*base, "--drain-settle", "0.5", "--drain-grace", "9"]))
    assert (timing.drain_settle_s, timing.drain_grace_s) == (0.5, 9.0)
