"""The rules of issue 43 as checkers: pure functions over the evidence a fault run leaves (engine logs,
client outcomes, Redis keys, metrics, process tables), no I/O. Each returns what broke the rule; the
driver (bench/faults/run.py) gathers the evidence and prints one row per fault x topology.

- **generations per request**: every ``Received request <id>`` line in the engines' logs (vLLM's
  ``--enable-log-requests``; the FAKE ENGINE logs the same on every API that runs the model). A request
  id received twice ran twice, except a token-exact continuation (``-moveN``: the same generation) and a
  run again after the first replica was killed -9 before its line (its process is confirmed dead);
- **no answer or clear error**: a non-streamed request that got neither an answer nor an error in its
  API's shape, or hung (:data:`LOST`), or whose exchange broke (:data:`CUT`);
- **streams cut without an error event**: a stream that ended without its last event and without an
  error event (except where the gateway serving it was itself killed);
- **errors where none may be**: after a fault off the request path (a slow health probe, a supervisor
  frozen or restarted, keep-alive connections closed while idle) every request is answered; only a
  tenant's own limit (429) may refuse one;
- **capacity left held** once the load stopped: leases, queue entries, waiters, wake-up lists, in-flight
  counts, rate-limit counters without an expiry;
- **task deaths**: a process of the stack (gateway, supervisor, Redis, nginx) that exited though the
  fault did not kill it (a SIGHUP, a SIGSTOP, an outage of Redis must not end one), and a registry that
  never came back while its owner lived and counted no failure (its heartbeat died silently);
- **orphans**: processes of the run whose parent died and that nobody records;
- **seconds until the registry is whole** after a Redis outage ended;
- **slow readers dropped**: a stream whose client reads too slowly is ended by the gateway, counted in
  ``llmgw_stream_stalled_total``, and its generation aborted at the engine (``Aborted request <id>``,
  vLLM's line with ``--enable-log-requests``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ANSWERED, CLEAR, CUT, LOST = "answered", "clear error", "cut", "lost"
DROPPED = "dropped"
"""A slow reader's stream ended by the gateway (its defence: no error event can reach a client that does
not read); judged by :func:`not_dropped`, not as a cut stream."""
# vLLM's id for a request: an endpoint prefix (chatcmpl-, cmpl-, embd-), the id the gateway passed on
# (the client's X-Request-Id, '-', 12 hex digits of its own), perhaps a prompt index; a continuation of a
# migrated generation adds -moveN (the same generation, continued elsewhere); -rerunN is a second run.
RECEIVED_LINE = rb"Received request \S*?(%s[\w.]*?)-[0-9a-f]{12}(-move\d+)?\b"
ANSWER_KEYS = ("choices", "data", "output", "content", "results", "scores")
"""A whole answer's keys per API: OpenAI chat/completions, embeddings/score, Responses, Messages, rerank."""
STREAM_ENDS = (b"[DONE]", b'"type":"message_stop"', b'"type": "message_stop"', b'"response.completed"')


# ---- client outcomes ----------------------------------------------------------------------------


def is_error_shape(body: bytes) -> bool:
    """OpenAI's ``{"error": {"message", "type", ...}}``, Anthropic's ``{"type": "error", "error": {...}}``."""
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(err, dict) and bool(err.get("message")) and "type" in err


def error_code(body: bytes) -> str:
    err = json.loads(body)["error"]
    return str(err.get("code") or err.get("type"))


def judge_whole(status: int, body: bytes) -> tuple[str, str]:
    """A non-streamed exchange: answered (a 2xx with an answer in its API's shape), clear error (an
    error in the API's shape), or lost."""
    if status >= 400:
        if is_error_shape(body):
            return CLEAR, f"{status} {error_code(body)}"
        return LOST, f"{status} not in the error shape: {body[:120]!r}"
    try:
        data = json.loads(body)
    except ValueError:
        return LOST, f"{status} with a body that is not JSON: {body[:120]!r}"
    if isinstance(data, dict) and any(data.get(k) for k in ANSWER_KEYS):
        return ANSWERED, ""
    return LOST, f"{status} without an answer: {body[:120]!r}"


def judge_stream(events: Sequence[bytes]) -> tuple[str, str]:
    """A stream's ``data:`` payloads: answered (its API's last event: ``[DONE]``, ``message_stop``,
    ``response.completed``), clear error (an error event), or lost (cut without either)."""
    errors = [e for e in events if e != b"[DONE]" and is_error_shape(e)]
    if errors:
        return CLEAR, "stream " + error_code(errors[0])
    if events and any(end in events[-1] for end in STREAM_ENDS):
        return ANSWERED, ""
    return LOST, f"stream cut after {len(events)} events without its end or an error event"


@dataclass(frozen=True)
class Outcome:
    """One request as the client saw it."""

    kind: str
    stream: bool
    outcome: str
    detail: str = ""


@dataclass(frozen=True)
class ClientReport:
    sent: int
    answered: int
    clear: int
    no_answer: list[str]
    """Non-streamed requests without an answer or clear error (lost or cut), described."""
    cut_streams: list[str]
    """Streams that ended without their last event or an error event (lost or cut), described."""


def client_report(outcomes: Iterable[Outcome], gateway_killed: bool) -> ClientReport:
    """The client side of a run. Where the fault killed a gateway, a stream cut is what nginx must do
    (it cannot append an error event to a body it started): not counted."""
    out = list(outcomes)
    bad = [o for o in out if o.outcome in (LOST, CUT)]
    no_answer = [f"{o.kind}: {o.outcome} {o.detail}" for o in bad if not o.stream]
    cut = [f"{o.kind}: {o.outcome} {o.detail}" for o in bad if o.stream]
    if gateway_killed:  # a cut exchange is the kill's; a clean end without its last event is not
        cut = [c for c in cut if ": lost " in c]
    return ClientReport(
        len(out),
        sum(o.outcome == ANSWERED for o in out),
        sum(o.outcome == CLEAR for o in out),
        no_answer,
        cut,
    )


def needless_errors(outcomes: Iterable[Outcome]) -> list[str]:
    """Clear errors other than a tenant's own rate limit (429), for a fault that must fail no request."""
    return [
        f"{o.kind}: {o.detail}" for o in outcomes if o.outcome == CLEAR and not o.detail.startswith("429")
    ]


# ---- generations ---------------------------------------------------------------------------------


@dataclass
class EngineRuns:
    """The generations the engines received, by request id, from the replicas' request logs.

    ``runs`` counts each id's receipts, ``killed`` those on a replica killed -9 before they ended (read
    before its log's size at the kill: a dead process writes nothing more, and the same file takes its
    restarted successor's lines after it); ``moved`` continuations of migrated generations."""

    runs: Counter[str] = field(default_factory=Counter)
    killed: Counter[str] = field(default_factory=Counter)
    by_replica: Counter[str] = field(default_factory=Counter)
    moved: Counter[str] = field(default_factory=Counter)

    @property
    def ids(self) -> set[str]:
        return set(self.runs) | set(self.killed)

    @property
    def rerun_after_kill(self) -> list[str]:
        """Ids whose one earlier run died with its replica and that ran once more: one generation."""
        return sorted(i for i in self.killed if self.killed[i] == 1 and self.runs[i] == 1)

    @property
    def ran_twice(self) -> list[str]:
        """Ids that reached an engine twice with both runs alive: a generation that ran twice."""
        return sorted(i for i in self.ids if self.runs[i] > 1 or self.killed[i] > 1)


def count_runs(logs: Mapping[str, bytes], prefix: str, cuts: Mapping[str, int]) -> EngineRuns:
    """Every ``Received request`` line of ``logs`` (replica name -> its log) whose id starts with
    ``prefix``; ``cuts``: replica name -> its log's size when it was killed -9."""
    pattern = re.compile(RECEIVED_LINE % re.escape(prefix).encode())
    out = EngineRuns()
    for name, data in logs.items():
        cut = cuts.get(name, -1)
        for m in pattern.finditer(data):
            rid = m.group(1).decode()
            if m.group(2):
                out.moved[rid] += 1
            else:
                (out.killed if m.start() < cut else out.runs)[rid] += 1
            out.by_replica[name] += 1
    return out


def read_logs(paths: list[Path]) -> dict[str, bytes]:
    """Log files by name (stem); a file that cannot be read has no lines."""
    data: dict[str, bytes] = {}
    for path in paths:
        try:
            data[path.stem] = path.read_bytes()
        except OSError:
            continue
    return data


def count_engine_runs(logs: list[Path], prefix: str, cuts: dict[Path, int]) -> EngineRuns:
    """:func:`count_runs` over log files."""
    return count_runs(read_logs(logs), prefix, {p.stem: n for p, n in cuts.items()})


# ---- capacity, tasks, processes, registry -----------------------------------------------------------


@dataclass(frozen=True)
class KeyState:
    """One Redis key as read after the run: its type, its size (members, fields, length), its TTL in
    seconds (-1: none), and for hashes of counts their sum."""

    key: str
    type: str
    size: int
    ttl_s: float = -1
    total: float = 0.0


HELD = re.compile(r":adm:\{[^}]*\}:(leases|queue|waiters|wake:.*)$")
INFLIGHT = re.compile(r":inflight:\{[^}]*\}$")
RATE = re.compile(r":rate:\{[^}]*\}$")


def capacity_held(keys: Iterable[KeyState]) -> list[str]:
    """What is still held once the load stopped and settled: admission leases, queue entries, waiters and
    wake-up lists (any member), in-flight counts above 0, and rate-limit counters with no expiry (held for
    good). Fair-share finish tags are not judged here: a tag ahead of the virtual clock is how start-time
    fair queueing works, so no key alone tells a double charge."""
    out = []
    for k in keys:
        if HELD.search(k.key) and k.size:
            out.append(f"{k.key}: {k.size} held")
        elif INFLIGHT.search(k.key) and k.total > 0:
            out.append(f"{k.key}: {k.total:g} in flight")
        elif RATE.search(k.key) and k.ttl_s < 0:
            out.append(f"{k.key}: no expiry")
    return sorted(out)


def inflight_count(value: str) -> int:
    """One gateway's field of an in-flight hash (``<ms> <json counts per replica>``): its requests."""
    try:
        counts = json.loads(value.partition(" ")[2] or value)
        return sum(int(v) for v in counts.values()) if isinstance(counts, dict) else 0
    except (ValueError, TypeError, AttributeError):
        return 0


METRIC = re.compile(r"^llmgw_task_failures_total(\{[^}]*\})?\s+([0-9.eE+-]+)$", re.M)


def task_failures(metrics_text: str) -> dict[str, float]:
    """``llmgw_task_failures_total`` by its labels, from a Prometheus text exposition."""
    return {m.group(1) or "": float(m.group(2)) for m in METRIC.finditer(metrics_text)}


def counter_rise(before: float, after: float) -> float:
    """One process' counter's rise over a cell: ``after - before``, or ``after`` when it went down (the
    process was started again in the cell and counts from 0)."""
    return after - before if after >= before else after


def failures_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """One process' task failures' rise by label (:func:`counter_rise`), the labels that rose."""
    rises = {k: counter_rise(before.get(k, 0.0), v) for k, v in after.items()}
    return {k: v for k, v in rises.items() if v > 0}


def task_failures_rise(before: Sequence[str], after: Sequence[str]) -> dict[str, float]:
    """``llmgw_task_failures_total``'s rise by label over a cell, summed over the processes: one exposition
    text each, in the same order before and after ('' for one unreachable)."""
    out: dict[str, float] = {}
    for b, a in zip(before, after, strict=True):
        for k, v in failures_delta(task_failures(b), task_failures(a)).items():
            out[k] = out.get(k, 0.0) + v
    return out


@dataclass(frozen=True)
class Exit:
    """A process of the stack that exited during the fault: its name, status (negative: killed by that
    signal) and whether the fault itself killed it."""

    name: str
    status: int
    asked: bool


def task_deaths(exits: Iterable[Exit], registry_back: bool, owner_counted: bool) -> list[str]:
    """Processes of the stack that exited though the fault did not kill them (status negative: the signal),
    and a registry that never came back while its owner lived and counted no task failure."""
    out = [f"{e.name} exited ({e.status}) unasked" for e in exits if not e.asked]
    if not registry_back and not owner_counted:
        out.append("the registry never came back and no task failure was counted")
    return out


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    name: str


def orphans(procs: Iterable[ProcInfo], own: set[int], recorded: set[int]) -> list[ProcInfo]:
    """Processes of the run (all carry the run's marker) whose parent is gone (re-parented outside the
    run: to init or a subreaper) and that nobody records (``recorded``: the supervisor's state file, the
    stack's services). ``own``: the driver's pid and its children's, alive and known."""
    table = list(procs)
    of_run = {p.pid for p in table} | own
    return [p for p in table if p.pid not in own and p.ppid not in of_run and p.pid not in recorded]


def registry_back_s(samples: Sequence[tuple[float, bool]], outage_end: float) -> float | None:
    """Seconds from the outage's end until the registry was whole and stayed so for the rest of the
    samples ((time, whole) pairs in order); None if it was not whole at the last sample."""
    if not samples or not samples[-1][1]:
        return None
    first = len(samples) - 1
    while first > 0 and samples[first - 1][1]:
        first -= 1
    return max(0.0, samples[first][0] - outage_end)


# ---- slow readers ------------------------------------------------------------------------------------

ABORTED_LINE = rb"Aborted request \S*?(%s)-[0-9a-f]{12}\b"
STALLED = re.compile(r"^llmgw_stream_stalled_total(\{[^}]*\})?\s+([0-9.eE+-]+)$", re.M)


def stalled_total(metrics_text: str) -> float:
    """``llmgw_stream_stalled_total`` summed over its labels (and the texts joined)."""
    return sum(float(m.group(2)) for m in STALLED.finditer(metrics_text))


def stalled_rise(before: Sequence[str], after: Sequence[str]) -> float:
    """``llmgw_stream_stalled_total``'s rise over a cell, summed over the processes (one exposition text
    each, in the same order before and after; :func:`counter_rise`: a gateway started again counts anew)."""
    return sum(counter_rise(stalled_total(b), stalled_total(a)) for b, a in zip(before, after, strict=True))


def not_dropped(ids: Sequence[str], stalled_delta: float, logs: Mapping[str, bytes]) -> list[str]:
    """What is missing for the slow readers ``ids`` (streams the gateway had to end): the stall counted
    once each in ``llmgw_stream_stalled_total`` (``stalled_delta``: its rise over the cell), and each
    one's generation aborted at an engine (``logs``: replica name -> its log)."""
    out = []
    if stalled_delta < len(ids):
        out.append(f"llmgw_stream_stalled_total rose by {stalled_delta:g}, {len(ids)} expected")
    for rid in ids:
        pattern = re.compile(ABORTED_LINE % re.escape(rid).encode())
        if not any(pattern.search(data) for data in logs.values()):
            out.append(f"{rid}: the engine's generation was not aborted")
    return out
