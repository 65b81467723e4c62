"""The simulation's options: each flag lands in its own field (an earlier positional call shifted them)."""

from __future__ import annotations

from pathlib import Path

from bench.routing_sim import SimOptions, parse


def test_flags_land_in_their_fields() -> None:
    o = parse(["--no-live", "--seed", "7", "--out", "/tmp/x.json", "--replicas", "4"])
    d = SimOptions()
    assert (o.live, o.seed, o.out, o.replicas) == (False, 7, Path("/tmp/x.json"), 4)
    assert (o.epsilon, o.inflight_epsilon, o.window) == (d.epsilon, d.inflight_epsilon, d.window)
