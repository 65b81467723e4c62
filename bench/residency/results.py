"""The results of a residency replay through a gateway (:mod:`bench.residency.live` on CPU,
:mod:`bench.residency.gpu` on the lent GPU): each request's record, an arm's row (the fraction of first
tokens within 1 s, p50/p99/max, errors, throughput), the table printed and the JSON file written."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

from bench.residency.run import FIRST_TOKEN_TARGET_S, percentile
from bench.residency.trace import TraceParams


@dataclass(slots=True)
class Record:
    model: str
    t: float
    """Trace seconds of its arrival."""
    state: str
    """The model's state when it arrived: awake, asleep1, asleep2, stopped (``x->``: moving from x); on CPU
    as the fake card holds it, on the GPU as the registry and the supervisor's log say."""
    ttft_s: float | None = None
    """Card seconds: the measured time to first token over the time scale (None: no token)."""
    ttft_real_s: float | None = None
    error: str = ""


@dataclass(slots=True)
class ArmResult:
    arm: str
    requests: int = 0
    errors: int = 0
    ttft_le_1s: float = 0.0
    p50_s: float = 0.0
    p99_s: float = 0.0
    max_s: float = 0.0
    throughput_rps: float = 0.0
    """Requests answered in full per trace second."""
    arrived_asleep: int = 0
    note: str = ""
    records: list[Record] = field(default_factory=list)


def result(arm: str, recs: list[Record], duration_s: float, note: str = "") -> ArmResult:
    ttfts = [r.ttft_s for r in recs if r.ttft_s is not None and not r.error]
    errors = sum(1 for r in recs if r.error)
    within = sum(1 for t in ttfts if t <= FIRST_TOKEN_TARGET_S)
    asleep = sum(1 for r in recs if r.state != "awake")
    return ArmResult(
        arm, len(recs), errors, round(within / max(1, len(recs)), 4), round(percentile(ttfts, 0.5), 3),
        round(percentile(ttfts, 0.99), 3), round(max(ttfts, default=0.0), 3),
        round((len(recs) - errors) / duration_s, 3), asleep, note, recs,
    )  # fmt: skip


def table(rows: list[ArmResult]) -> str:
    lines = [f"{'arm':<10} {'requests':>8} {'errors':>6} {'<=1s':>7} {'p50 s':>7} {'p99 s':>7} {'max s':>7} "
             f"{'req/s':>6} {'not awake':>9}"]  # fmt: skip
    for r in rows:
        lines.append(f"{r.arm:<10} {r.requests:>8} {r.errors:>6} {r.ttft_le_1s:>7.2%} {r.p50_s:>7.3f} "
                     f"{r.p99_s:>7.3f} {r.max_s:>7.3f} {r.throughput_rps:>6.3f} {r.arrived_asleep:>9}  "
                     f"{r.note}")  # fmt: skip
    return "\n".join(lines)


def report_of(
    head: dict[str, object], params: TraceParams, rows: list[ArmResult], took_s: float
) -> dict[str, object]:
    """The results file: ``head`` (what ran), the date, the trace, each arm's row and each request's."""
    return {
        **head,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "wall_s": round(took_s, 1),
        "trace": params.as_dict(),
        "arms": [{k: v for k, v in asdict(r).items() if k != "records"} for r in rows],
        "record_fields": RECORD_FIELDS,
        "records": {r.arm: [row_of(x) for x in r.records] for r in rows},
    }


RECORD_FIELDS = ["model", "t", "state", "ttft_s", "ttft_real_s", "error"]
"""The columns of each request's row in the JSON (one short list a request keeps the file small)."""


def row_of(rec: Record) -> list[object]:
    """``rec`` as a row of :data:`RECORD_FIELDS`, TTFTs to 0.1 ms of card time and 10 us measured."""
    card = None if rec.ttft_s is None else round(rec.ttft_s, 4)
    real = None if rec.ttft_real_s is None else round(rec.ttft_real_s, 5)
    return [rec.model, rec.t, rec.state, card, real, rec.error]


def dump(out: dict[str, object], tables: tuple[str, ...] = ()) -> str:
    """The report as JSON: indented, each request's row on one line, and so each row of the top-level
    lists named in ``tables`` (written after the rest, before the records)."""
    head = json.dumps({k: v for k, v in out.items() if k != "records" and k not in tables}, indent=1)
    parts = [f" {json.dumps(k)}: {rows_json(v)}" for k in tables if isinstance(v := out.get(k), list)]
    records = out["records"]
    assert isinstance(records, dict)
    arms = ",\n".join(f" {json.dumps(arm)}: {rows_json(rows)}" for arm, rows in records.items())
    parts.append(' "records": {\n' + arms + "\n }")
    return head[:-2] + ",\n" + ",\n".join(parts) + "\n}\n"


def rows_json(rows: list[object]) -> str:
    """A JSON list, one row a line."""
    return "[\n" + ",\n".join(f"  {json.dumps(row)}" for row in rows) + "\n ]" if rows else "[]"
