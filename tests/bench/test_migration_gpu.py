"""bench/gpu/migration_gpu.py's checks on recorded frames and log lines (the H200 recipe of issue 30):
the seam check that does not depend on numerics, which streams the gateway moved and at which token
offset, the stall at the seam and the gap over the kill, where ids diverge against the seam, and byte
identity counted only where two references agree."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.gpu.migration_gpu import Capture, divergence, first_diff, moved_ids, report, seam_ok, take

# a chat stream as vLLM sends it with return_token_ids and include_usage (one choice)
FRAMES: list[dict[str, Any]] = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
     "prompt_token_ids": [1, 2, 3]},
    {"choices": [{"index": 0, "delta": {"content": "Light"}, "token_ids": [10], "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"content": "houses"}, "token_ids": [11], "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"content": "."}, "token_ids": [12], "finish_reason": "length"}]},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}},
]  # fmt: skip


def args(tokens: int = 3, ignore_eos: bool = True, log: str = "", streams: int = 1) -> argparse.Namespace:
    return argparse.Namespace(
        tokens=tokens, ignore_eos=ignore_eos, gateway_log=log, streams=streams, model="m", prompts="text"
    )


def captured(frames: list[dict[str, Any]], start: float = 0.0) -> Capture:
    out = Capture(sent=start)
    for k, frame in enumerate(frames):
        out.times.append(start + 0.1 * (k + 1))
        take(frame, out)
        out.counts.append(len(out.ids))
    return out


def test_a_whole_stream_passes_the_seam_check() -> None:
    cap = captured(FRAMES)
    assert (cap.text, cap.ids, cap.finishes, len(cap.usages)) == ("Lighthouses.", [10, 11, 12], 1, 1)
    assert seam_ok(cap, cap, args()) == []


def test_a_repeated_token_at_the_seam_is_found() -> None:
    doubled = [*FRAMES[:3], FRAMES[2], *FRAMES[3:]]  # the continuation resent the token before the seam
    problems = seam_ok(captured(FRAMES), captured(doubled), args())
    assert "completion_tokens 3 != 4 ids received" in problems
    assert "4 ids, not 3" in problems


def test_two_finishes_and_usage_twice_are_found() -> None:
    twice = [*FRAMES, FRAMES[3], FRAMES[4]]
    problems = seam_ok(captured(FRAMES), captured(twice), args())
    assert "2 finish_reasons" in problems and "usage sent 2 times" in problems


def test_usage_must_count_the_prompt_once() -> None:
    usage = {"prompt_tokens": 6, "completion_tokens": 3}
    wrong: list[dict[str, Any]] = [*FRAMES[:4], {"choices": [], "usage": usage}]
    assert seam_ok(captured(FRAMES), captured(wrong), args()) == ["prompt_tokens 6 != reference 3"]


def test_without_ignore_eos_the_length_is_free() -> None:
    assert seam_ok(captured(FRAMES), captured(FRAMES), args(tokens=200, ignore_eos=False)) == []


def test_moved_streams_come_from_the_gateway_log_of_that_model(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    line = (
        "2026-12-04 21:54:56,276 WARNING llmgw.migration request_id={rid} trace_id=5c58 model={m} "
        "migration moved: from={m}-0 to={m}-1 offset=9 attempt=1 reason=upstream closed the connection\n"
    )
    log.write_text(
        line.format(rid="m-hit-3", m="m") + line.format(rid="m-hit-5", m="m")
        + line.format(rid="other-hit-7", m="other") + line.format(rid="m-ref-1", m="m")
    )  # fmt: skip
    assert moved_ids(str(log), "m") == {3: 9, 5: 9}  # each moved stream with its seam's token offset


def test_the_stall_is_the_gap_over_the_kill() -> None:
    cap = Capture(times=[1.0, 1.1, 1.2, 1.9, 2.0])
    assert round(cap.gap_over(1.25), 3) == 0.7
    assert cap.gap_over(5.0) == 0.0


def test_the_seam_gap_is_at_the_logged_offset_not_at_the_kill() -> None:
    # ids 1-3 arrive by 1.2; ids 4-5 (read before the kill at 1.25) reach the client at 1.3 and 1.35;
    # the survivor's first id (the 6th) at 1.9: the seam's stall is 0.55 s, the gap over the kill 0.05 s
    cap = Capture(times=[1.0, 1.1, 1.2, 1.3, 1.35, 1.9, 2.0], counts=[1, 2, 3, 4, 5, 6, 7])
    assert round(cap.seam_gap(5), 3) == 0.55
    assert round(cap.gap_over(1.25), 3) == 0.1
    assert cap.seam_gap(0) == 0.0  # nothing before the first event


def test_the_longest_gap_counts_only_events_inside_the_window() -> None:
    cap = Capture(times=[0.0, 1.0, 1.1, 1.5, 1.6, 9.0])
    assert round(cap.longest_gap(0.9, 3.0), 3) == 0.4


def test_divergence_is_placed_against_each_moved_streams_seam() -> None:
    ref = [Capture(ids=[1, 2, 3, 4, 5]), Capture(ids=[1, 2, 3, 4, 5]), Capture(ids=[1, 2, 3])]
    hit = [Capture(ids=[1, 2, 3, 9, 9]), Capture(ids=[1, 9, 3, 4, 5]), Capture(ids=[1, 2, 7])]
    out = divergence(ref, hit, {0: 2, 1: 3})  # streams 0 and 1 moved at offsets 2 and 3; 2 stayed
    assert (out["differ_moved"], out["differ_stayed"], out["differ_moved_before_seam"]) == (2, 1, 1)
    assert out["per_stream"]["hit-0"] == {"moved": True, "first_diff": 3, "seam": 2, "ids": 5}
    assert out["per_stream"]["hit-2"]["seam"] is None
    assert first_diff([1, 2], [1, 2, 3]) == 2


def test_identity_counts_only_prompts_stable_in_both_references(tmp_path: Path) -> None:
    same, other = captured(FRAMES), captured(FRAMES)
    other.text, other.ids = "Lighthouse!", [10, 13]  # a near-tie: the second reference differs
    ref, ref2 = [same, same], [same, other]
    hit = [captured(FRAMES), captured(FRAMES)]
    hit[1].text = "Light"  # differs, but only from an unstable reference
    out = report(args(streams=2), ref, ref2, hit, 0.25)
    assert (out["reference_stable"], out["byte_identical_of_stable"], out["byte_identical_all"]) == (1, 1, 1)
    assert out["errors"] == 0 and out["seam_ok"] == 2
