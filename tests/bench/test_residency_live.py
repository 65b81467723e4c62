"""The live residency replay's short form (bench/residency/live.py): two models, a 20-second trace run
50 times compressed, the three arms at once through a real gateway and supervisor with FAKE GPU ENGINEs
taught the H200: no error, a record per request with the model's state on arrival, and the autopilot's
within-1-s fraction computed from the measured TTFTs."""

from __future__ import annotations

import json
from pathlib import Path

from bench.residency.live import main
from bench.residency.trace import TraceParams, generate

SCALE = 0.02


def test_the_short_live_replay_serves_every_request_of_every_arm(tmp_path: Path) -> None:
    out = tmp_path / "live.json"
    argv = ["--models", "2", "--duration", "20", "--time-scale", str(SCALE), "--short", "--parallel"]
    main([*argv, "--out", str(out)])
    got = json.loads(out.read_text())
    arms = {a["arm"]: a for a in got["arms"]}
    assert list(arms) == ["autopilot", "today", "all awake"]
    sent = len(generate(TraceParams(**got["trace"])))  # the short trace the run replayed
    fields = got["record_fields"]
    records = {
        arm: [dict(zip(fields, row, strict=True)) for row in rows] for arm, rows in got["records"].items()
    }
    for name, arm in arms.items():
        recs = records[name]
        assert arm["errors"] == 0 and arm["requests"] == len(recs) == sent, (name, arm)
        assert {r["model"] for r in recs} == {"m0", "m1"}
        known = ("awake", "asleep1", "asleep2", "stopped")
        assert [r for r in recs if not (r["state"] in known or "->" in r["state"])] == []
        assert [
            r
            for r in recs
            if not (r["ttft_real_s"] > 0 and abs(r["ttft_s"] * SCALE - r["ttft_real_s"]) < 1e-5)
        ] == []
    auto = records["autopilot"]
    within = sum(1 for r in auto if r["ttft_s"] <= 1.0) / len(auto)
    assert arms["autopilot"]["ttft_le_1s"] == round(within, 4)
