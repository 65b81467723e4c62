"""`make chaos`: a fault matrix on the real embedded stack, under mixed load through nginx.

Each phase runs the same load (streamed and non-streamed chat, completions, embeddings, from
``--concurrency`` clients) while one fault strikes a quarter of the way in: non-streamed requests that
generate past the first-byte timeout, a vLLM replica killed -9 (its whole process group, as a container
dies), a gateway killed -9 then started again, the state Redis killed -9 then started again, the key store
killed -9 then started again (keys must survive), a replica frozen with SIGSTOP for longer than the
gateways' timeouts, a replica that fails every start (its port taken after a kill -9: bounded restarts,
then failed, then replaced on SIGHUP), the supervisor killed -9 and started again (it adopts its
replicas). Between phases the stack gets back to full strength.

Every request ends as one of: **answered** (a complete answer: JSON with choices/data, or a stream that
ends with ``data: [DONE]``), **clear error** (an error in OpenAI's shape with its status, or a stream that
ends with an SSE error event and ``[DONE]``), **cut** (the HTTP exchange itself failed where the client
sees it: a connection reset, a chunked body that ends without its last chunk; only a process killed -9
while it was sending, a gateway, can leave this, because nginx cannot append an error to a body it has
started), or **lost** (silent or hung: a stream that ends cleanly without ``[DONE]``, a 200 without an
answer, a body that is not in the error shape, a client timeout). Lost must be 0.

Generations are counted at the engine: every request carries its own ``X-Request-Id``, which the gateway
passes on to vLLM (with a suffix of its own), and every replica runs with ``--enable-log-requests``, whose
``Received request <id>`` lines in the replicas' logs say which replica ran what. A request id that
reached an engine twice **ran twice**, unless the earlier run was on a replica killed -9 before it ended
(its generation died with the process; the run elsewhere is its only one): those are counted apart as
**rerun after a kill**. A continuation of a migrated generation (vLLM id with ``-moveN``: the gateway
went on where a failed replica stopped, docs/gateway/migration.md) is counted apart too, as
**continued**. Ran twice must be 0 as well. The replica faults (kill -9, SIGSTOP) must leave no stream
broken: none cut, none ended by an error event (migration). The exit status is 1 otherwise.

    python -m bench.chaos                        # its own stack on free ports (several minutes to start)
    python -m bench.chaos --phase-s 20 --concurrency 4   # shorter
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
import yaml

from bench.faults.checks import (
    ANSWERED,
    CLEAR,
    CUT,
    LOST,
    EngineRuns,
    count_engine_runs,
    judge_stream,
    judge_whole,
)
from gateway.auth.keys import ApiKey, KeyStore, new_secret
from gateway.settings import GatewaySettings
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord, ReplicaState, read_registry
from llmgw_tools.stack.stack import REPO, Stack, StackConfig
from testing.poll import until
from workers.life.adopt import StateFile, pid_alive

log = logging.getLogger("llmgw.chaos")
LOG_REQUESTS = "--enable-log-requests"  # vLLM logs "Received request <id>" for each request it takes
# The faults a migrating stream must outlive: no stream of theirs may be cut or end with an error event.
STREAMS_SURVIVE = frozenset({"kill -9 vLLM replica", "freeze replica"})


@dataclass(frozen=True)
class Plan:
    """The numbers of one run: how long each phase loads, how many clients, how long a freeze lasts."""

    phase_s: float = 40.0
    concurrency: int = 6
    fault_at: float = 0.25  # of the phase
    down_s: float = 3.0  # a killed gateway or Redis stays down this long before it is started again
    freeze_s: float = 25.0  # longer than the gateways' timeouts (chaos_config lowers them to 10 s)
    client_timeout_s: float = 120.0
    max_tokens: int = 24
    long_requests: int = 2  # non-streamed requests generating past the first-byte timeout, at once
    long_factor: float = 1.5  # they generate this many times what the idle engine makes in that timeout
    long_timeout_s: float = 600.0  # the client's patience with them (the gateway's total deadline)
    crash_deadline_s: float = 240.0  # a replica that fails every start is left failed within this
    adopt_deadline_s: float = 60.0  # a supervisor started again has adopted its replicas within this


@dataclass
class Tally:
    """Outcomes of one phase, by kind of request, with the first few lost ones described."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # clear errors by status and code
    lost: list[str] = field(default_factory=list)
    sent: int = 0

    def add(self, kind: str, outcome: str, detail: str = "") -> None:
        self.counts[(kind, outcome)] += 1
        if outcome == CLEAR:
            self.errors[detail] += 1
        if outcome in (LOST, CUT) and len(self.lost) < 10:
            self.lost.append(f"{outcome} {kind}: {detail}")

    def total(self, outcome: str) -> int:
        return sum(n for (_, o), n in self.counts.items() if o == outcome)


@dataclass(frozen=True)
class Request:
    kind: str
    path: str
    body: dict[str, Any]
    stream: bool


def requests_for(stack: Stack, max_tokens: int) -> list[Request]:
    """One of each kind: the first generating model for chat and completions, the pooling one for
    embeddings (when the fleet has one)."""
    models = stack.fleet.models
    chat = next(m.name for m in models if m.engine.runner != "pooling")
    msgs = [{"role": "user", "content": "Tell me about the sea."}]
    ask = {"model": chat, "messages": msgs, "max_tokens": max_tokens}
    out = [
        Request("chat", "/v1/chat/completions", ask, False),
        Request("chat-stream", "/v1/chat/completions",
                {"model": chat, "messages": msgs, "max_tokens": max_tokens, "stream": True}, True),
        Request("completion", "/v1/completions",
                {"model": chat, "prompt": "Once upon a time", "max_tokens": max_tokens}, False),
        Request("completion-stream", "/v1/completions",
                {"model": chat, "prompt": "The sea is", "max_tokens": max_tokens, "stream": True}, True),
    ]  # fmt: skip
    pooling = [m.name for m in models if m.engine.runner == "pooling"]
    if pooling:
        out.append(Request("embedding", "/v1/embeddings", {"model": pooling[0], "input": "the sea"}, False))
    return out


def long_request(model: str, tokens: int) -> Request:
    """A non-streamed chat request that generates exactly ``tokens`` tokens (vLLM's ``min_tokens``)."""
    msgs = [{"role": "user", "content": "Write a long story about the sea."}]
    body = {"model": model, "messages": msgs, "max_tokens": tokens, "min_tokens": tokens}
    return Request("chat-long", "/v1/chat/completions", body, False)


async def send(client: httpx.AsyncClient, url: str, req: Request, rid: str) -> tuple[str, str]:
    """One request with its own ``X-Request-Id`` (``rid``), judged."""
    headers = {"x-request-id": rid}
    try:
        if not req.stream:
            r = await client.post(url + req.path, json=req.body, headers=headers)
            return judge_whole(r.status_code, r.content)
        async with client.stream("POST", url + req.path, json=req.body, headers=headers) as r:
            if r.status_code != 200:
                return judge_whole(r.status_code, await r.aread())
            events = [
                line.removeprefix("data:").strip().encode()
                async for line in r.aiter_lines()
                if line.startswith("data:")
            ]
            return judge_stream(events)
    except httpx.TimeoutException as exc:
        return LOST, f"client timeout ({type(exc).__name__})"
    except httpx.HTTPError as exc:
        return CUT, f"{type(exc).__name__}: {exc}"


@dataclass
class Load:
    """What one phase's requests share: where they go, their key, their ids, their tally."""

    url: str
    headers: dict[str, str]
    prefix: str
    tally: Tally = field(default_factory=Tally)
    seq: itertools.count[int] = field(default_factory=itertools.count)

    def next_id(self) -> str:
        self.tally.sent += 1
        return f"{self.prefix}{next(self.seq)}"

    async def one(self, client: httpx.AsyncClient, req: Request) -> str:
        outcome, detail = await send(client, self.url, req, self.next_id())
        self.tally.add(req.kind, outcome, detail)
        return outcome


async def load(ld: Load, reqs: list[Request], plan: Plan, until: float) -> None:
    """``plan.concurrency`` clients, each sending the next kind of request until ``until``."""
    kinds = itertools.cycle(reqs)

    async def client_loop() -> None:
        timeout = httpx.Timeout(plan.client_timeout_s, connect=10.0)
        async with httpx.AsyncClient(timeout=timeout, headers=ld.headers) as client:
            while time.monotonic() < until:
                await ld.one(client, next(kinds))

    await asyncio.gather(*(client_loop() for _ in range(plan.concurrency)))


# ---- faults -------------------------------------------------------------------------------------

Fault = Callable[["Chaos"], Awaitable[str]]


def signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgid(pid), sig)


async def until_true(check: Callable[[], Awaitable[bool]], deadline_s: float, every_s: float = 0.5) -> bool:
    """Poll ``check`` until it is true (True) or the deadline passes (False)."""
    try:
        await until(check, deadline_s, "condition", interval_s=every_s)
    except AssertionError:
        return False
    return True


class Chaos:
    """The stack under test and what the faults need: replica processes, services, the plan, the
    phase's load; a fault notes here what it found wrong (``problems``) and where it cut a log."""

    def __init__(self, stack: Stack, plan: Plan) -> None:
        self.stack, self.plan = stack, plan
        self.load: Load | None = None
        self.cuts: dict[Path, int] = {}
        self.problems: list[str] = []
        self.idle_tok_s = 0.0  # one sequence's decode rate on an idle replica (calibrate)

    async def records(self) -> list[ReplicaRecord]:
        redis = aioredis.Redis.from_url(self.stack.config.redis_url)
        try:
            return await read_registry(redis, RedisKeys())
        finally:
            await redis.aclose()

    async def ready_replica(self, model: str) -> ReplicaRecord:
        ready = [r for r in await self.records() if r.model == model and r.routable]
        if not ready:
            raise RuntimeError(f"no ready replica of {model}")
        return min(ready, key=lambda r: r.id)

    def pid_of(self, replica_id: str) -> int:
        """The replica's pid from the supervisor's state file (also right for a replica it adopted)."""
        for e in StateFile(self.stack.config.run_dir / "workers-state.json").load():
            if e.id == replica_id:
                return e.pid
        raise RuntimeError(f"replica {replica_id} is not in the supervisor's state file")

    async def replica_pid(self, model: str) -> tuple[str, int]:
        """(replica id, pid) of a ready replica of ``model``."""
        rec = await self.ready_replica(model)
        return rec.id, self.pid_of(rec.id)

    def replica_log(self, replica_id: str) -> Path:
        return self.stack.logs / f"{replica_id}.log"

    def replica_logs(self) -> list[Path]:
        """Every replica's log (the stack's own services log elsewhere in the same folder)."""
        services = {s.log_file for s in self.stack.services}
        return sorted(p for p in self.stack.logs.glob("*.log") if p not in services)

    async def kill_replica(self, replica_id: str, pid: int) -> None:
        """kill -9 the replica's whole group; once it is dead, its log is cut where it stopped."""
        signal_group(pid, signal.SIGKILL)

        async def dead() -> bool:
            return not pid_alive(pid)

        await until_true(dead, 10, 0.05)
        path = self.replica_log(replica_id)
        self.cuts[path] = path.stat().st_size

    @property
    def chat_model(self) -> str:
        """The generating model with the most replicas: a fault on one leaves another serving."""
        models = [m for m in self.stack.fleet.models if m.engine.runner != "pooling"]
        return max(models, key=lambda m: m.replicas).name

    @property
    def first_byte_timeout_s(self) -> float:
        given = self.stack.config.gateway_env.get("LLMGW_FIRST_BYTE_TIMEOUT_S")
        return float(given) if given else GatewaySettings.model_fields["first_byte_timeout_s"].default

    def context_left(self, model: str) -> int:
        m = next(m for m in self.stack.fleet.models if m.name == model)
        return (m.engine.max_model_len or 2048) - 64

    async def calibrate(self, headers: dict[str, str]) -> None:
        """One sequence's decode rate on the idle stack: 128 forced tokens, timed."""
        ld = Load(self.stack.config.nginx_url, headers, "chaos.0.0.")
        async with httpx.AsyncClient(timeout=self.plan.client_timeout_s, headers=headers) as client:
            started = time.monotonic()
            outcome = await ld.one(client, long_request(self.chat_model, 128))
            took = time.monotonic() - started
        if outcome != ANSWERED:
            raise RuntimeError(f"calibration request not answered: {ld.tally.errors or ld.tally.lost}")
        self.idle_tok_s = 128 / took
        log.info("one sequence decodes %.0f tokens/s on the idle stack", self.idle_tok_s)

    async def kill_restart(self, name: str) -> str:
        self.stack.service(name).signal_group(signal.SIGKILL)
        await asyncio.sleep(self.plan.down_s)
        await self.stack.restart(name)
        return f"{name} killed -9, started again after {self.plan.down_s:g} s"


async def kill_replica(c: Chaos) -> str:
    rid, pid = await c.replica_pid(c.chat_model)
    await c.kill_replica(rid, pid)
    return f"replica {rid} (pid {pid}) killed -9; the supervisor restarts it"


async def kill_gateway(c: Chaos) -> str:
    return await c.kill_restart("gateway-1")


async def kill_redis(c: Chaos) -> str:
    return await c.kill_restart("redis")


async def kill_key_store(c: Chaos) -> str:
    return await c.kill_restart("redis-keys")


async def freeze_replica(c: Chaos) -> str:
    rid, pid = await c.replica_pid(c.chat_model)
    signal_group(pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(c.plan.freeze_s)
    finally:
        signal_group(pid, signal.SIGCONT)
    return f"replica {rid} frozen (SIGSTOP) for {c.plan.freeze_s:g} s, then SIGCONT"


async def long_non_streamed(c: Chaos) -> str:
    """Non-streamed chat requests that generate past the gateways' first-byte timeout (vLLM sends such an
    answer's head only once generation ends): each must be answered, and run once. They generate
    ``long_factor`` times what one idle sequence makes within that timeout (slower under load)."""
    assert c.load is not None
    timeout = c.first_byte_timeout_s
    tokens = min(
        c.context_left(c.chat_model), max(64, math.ceil(c.plan.long_factor * timeout * c.idle_tok_s))
    )
    req = long_request(c.chat_model, tokens)

    async def timed(client: httpx.AsyncClient) -> tuple[str, float]:
        started = time.monotonic()
        outcome = await c.load.one(client, req)  # type: ignore[union-attr]
        return outcome, time.monotonic() - started

    async with httpx.AsyncClient(timeout=c.plan.long_timeout_s, headers=c.load.headers) as client:
        done = await asyncio.gather(*(timed(client) for _ in range(c.plan.long_requests)))
    took = [t for _, t in done]
    past = sum(1 for t in took if t > timeout)
    answered = sum(1 for o, _ in done if o == ANSWERED)
    if answered < len(done):
        c.problems.append(f"{len(done) - answered} long non-streamed requests were not answered")
    if not past:
        c.problems.append(f"no long request took longer than the first-byte timeout ({timeout:g} s)")
    return (
        f"{len(done)} non-streamed chats of {tokens} tokens took {min(took):.0f}-{max(took):.0f} s "
        f"(first-byte timeout {timeout:g} s): {past} past it, {answered} answered"
    )


async def crash_loop(c: Chaos) -> str:
    """A replica that fails every start: killed -9, its port taken at once by a listener of ours (the
    supervisor never starts a replica on a taken port). Its restarts must stop (left FAILED); then the
    port is freed and a SIGHUP to the supervisor replaces it."""
    rec = await c.ready_replica(c.chat_model)
    port = int(rec.url.rsplit(":", 1)[-1])
    await c.kill_replica(rec.id, c.pid_of(rec.id))
    workers_log = c.stack.service("workers").log_file
    mark = workers_log.stat().st_size
    holder = await take_port(c.stack.config.host, port)
    try:
        failed = await until_true(lambda: state_is(c, rec, ReplicaState.FAILED), c.plan.crash_deadline_s)
    finally:
        holder.close()
    text = workers_log.read_bytes()[mark:].decode(errors="replace")
    restarts = text.count(f"replica={rec.id} restart ")
    if not failed:
        c.problems.append(
            f"{rec.id} failing every start was not left failed within {c.plan.crash_deadline_s:g} s"
        )
    workers = c.stack.service("workers").pid
    assert workers is not None
    os.kill(workers, signal.SIGHUP)  # the operator asks again: a new replica in its slot
    ended = "left failed" if failed else "NOT left failed"
    return (
        f"replica {rec.id} killed -9, its port {port} taken: {restarts} restarts, then {ended}; "
        "port freed, SIGHUP: replaced"
    )


async def state_is(c: Chaos, rec: ReplicaRecord, state: ReplicaState) -> bool:
    return any(r.id == rec.id and r.state is state for r in await c.records())


async def take_port(host: str, port: int, deadline_s: float = 10.0) -> socket.socket:
    """Listen on ``port`` as soon as the killed replica's socket is gone."""
    deadline = time.monotonic() + deadline_s
    while True:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen()
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)


async def kill_supervisor(c: Chaos) -> str:
    """The supervisor killed -9 (its replicas live on, each in its own process group) and started again:
    it must adopt every replica, same id and same instance, none restarted."""
    before = {r.id: r.instance for r in await c.records() if r.routable}
    note = await c.kill_restart("workers")

    async def adopted() -> bool:
        return {r.id: r.instance for r in await c.records() if r.state is ReplicaState.READY} == before

    ok = await until_true(adopted, c.plan.adopt_deadline_s)
    if not ok:
        c.problems.append("the supervisor started again did not adopt every replica it had")
    return f"{note}; {'adopted' if ok else 'did NOT adopt'} its {len(before)} ready replicas (same instances)"


async def no_fault(c: Chaos) -> str:
    return "no fault"


PHASES: dict[str, Fault] = {
    "baseline": no_fault,
    "long non-streamed": long_non_streamed,
    "kill -9 vLLM replica": kill_replica,
    "kill -9 gateway": kill_gateway,
    "kill -9 Redis (state)": kill_redis,
    "kill -9 key store": kill_key_store,
    "freeze replica": freeze_replica,
    "replica fails every start": crash_loop,
    "kill -9 supervisor": kill_supervisor,
}


# ---- the run ------------------------------------------------------------------------------------


@dataclass
class PhaseResult:
    name: str
    note: str
    tally: Tally
    engine: EngineRuns = field(default_factory=EngineRuns)
    problems: list[str] = field(default_factory=list)

    @property
    def broken_streams(self) -> int:
        """Streams cut or ended by an error event (a fault in STREAMS_SURVIVE must leave none)."""
        errors = sum(n for detail, n in self.tally.errors.items() if detail.startswith("stream "))
        return self.tally.total(CUT) + errors

    @property
    def failed(self) -> bool:
        broken = self.name in STREAMS_SURVIVE and self.broken_streams > 0
        return bool(self.tally.total(LOST) or self.engine.ran_twice or self.problems or broken)

    def summary(self) -> dict[str, Any]:
        t, e = self.tally, self.engine
        return {
            "phase": self.name, "what happened": self.note, "sent": t.sent,
            **{o: t.total(o) for o in (ANSWERED, CLEAR, CUT, LOST)},
            "clear errors": dict(t.errors), "lost or cut": t.lost,
            "at the engines": len(e.ids), "by replica": dict(e.by_replica),
            "rerun after a kill": len(e.rerun_after_kill), "ran twice": len(e.ran_twice),
            "continued (migrated)": sum(e.moved.values()), "broken streams": self.broken_streams,
            "ran twice ids": e.ran_twice[:10], "problems": self.problems,
        }  # fmt: skip


async def run_phase(
    c: Chaos, index: int, name: str, reqs: list[Request], headers: dict[str, str], run_id: str
) -> PhaseResult:
    plan = c.plan
    prefix = f"chaos.{run_id}.{index}."
    c.load, c.cuts, c.problems = Load(c.stack.config.nginx_url, headers, prefix), {}, []
    start = time.monotonic()
    loader = asyncio.create_task(load(c.load, reqs, plan, start + plan.phase_s))
    await asyncio.sleep(plan.phase_s * plan.fault_at)
    log.info("phase %r: fault", name)
    try:
        note = await PHASES[name](c)
    except Exception as exc:  # the fault itself failed: said, and the run goes on
        log.exception("phase %r: the fault failed", name)
        note = f"the fault failed: {type(exc).__name__}: {exc}"
        c.problems.append(note)
    await loader
    await c.stack.wait_for_fleet()  # full strength again before the next phase
    engine = count_engine_runs(c.replica_logs(), prefix, c.cuts)
    if c.load.tally.total(ANSWERED) and not engine.ids:
        c.problems.append(f"no generation counted at the engines: is vLLM run with {LOG_REQUESTS}?")
    return PhaseResult(name, note, c.load.tally, engine, c.problems)


COLUMNS = f"{'phase':<26} {'sent':>5} {'answered':>8} {'clear err':>9} {'cut':>3} {'lost':>4} " \
          f"{'engine':>6} {'rerun':>5} {'twice':>5}"  # fmt: skip


def table(results: list[PhaseResult]) -> str:
    """One row per phase: requests sent, their outcomes, the generations the engines ran (distinct
    ids), reruns after a kill, generations that ran twice; then the details."""
    rows = [COLUMNS + "  what happened"]
    for r in results:
        t, e = r.tally, r.engine
        counts = (
            f"{t.sent:>5} {t.total(ANSWERED):>8} {t.total(CLEAR):>9} {t.total(CUT):>3} {t.total(LOST):>4}"
        )
        engine = f"{len(e.ids):>6} {len(e.rerun_after_kill):>5} {len(e.ran_twice):>5}"
        rows.append(f"{r.name:<26} {counts} {engine}  {r.note}")
        pad = " " * 27
        if t.errors:
            rows.append(pad + "clear errors: " + ", ".join(f"{k} x{n}" for k, n in t.errors.most_common()))
        rows.append(pad + "engine runs: " + ", ".join(f"{k} {n}" for k, n in sorted(e.by_replica.items())))
        rows += [pad + line for line in t.lost]
        rows += [pad + f"ran twice: {i}" for i in e.ran_twice[:10]]
        rows += [pad + f"PROBLEM: {p}" for p in r.problems]
    return "\n".join(rows)


async def api_key(stack: Stack) -> dict[str, str]:
    """With keys on, a key in the key store (which must survive its own kill -9); else no header."""
    if stack.config.gateway_env.get("LLMGW_AUTH", "").lower() not in ("1", "true"):
        return {}
    redis = aioredis.Redis.from_url(stack.config.keys_redis_url)
    key_id, secret = new_secret()
    try:
        await KeyStore(redis, RedisKeys()).create(ApiKey(key_id, "chaos"), secret)
    finally:
        await redis.aclose()
    return {"authorization": f"Bearer {secret}"}


async def run_chaos(stack: Stack, plan: Plan, phases: list[str] | None = None) -> list[PhaseResult]:
    """Every phase in turn on a running stack; prints each phase's row as it ends, then the table."""
    chaos, results = Chaos(stack, plan), []
    headers = await api_key(stack)
    reqs = requests_for(stack, plan.max_tokens)
    names = [n for n in phases or list(PHASES) if n != "kill -9 key store" or headers]  # keys off: no store
    if "long non-streamed" in names:
        await chaos.calibrate(headers)
    run_id = os.urandom(4).hex()
    for index, name in enumerate(names, start=1):
        result = await run_phase(chaos, index, name, reqs, headers, run_id)
        t, e = result.tally, result.engine
        counts = ", ".join(f"{o} {t.total(o)}" for o in (ANSWERED, CLEAR, CUT, LOST))
        errors = ", ".join(f"{k} x{n}" for k, n in t.errors.most_common())
        print(f"{name}: sent {t.sent}, {counts}, ran twice {len(e.ran_twice)}; {errors}", flush=True)
        results.append(result)
    print(table(results), flush=True)
    return results


def with_request_logs(fleet: dict[str, Any]) -> dict[str, Any]:
    """The fleet (as loaded from YAML) with vLLM's request log on for every model, so that the
    generations can be counted at the engine."""
    for m in fleet["models"]:
        engine = m.setdefault("engine", {})
        engine["extra_args"] = [*engine.get("extra_args", []), LOG_REQUESTS]
    return fleet


# A replica that fails every start gives up after 3 restarts at most 2 s apart (the defaults, 10 and
# 30 s, take minutes); everything else is the shipped supervisor.
CHAOS_WORKERS_ARGS = ("--restart-give-up-after", "3", "--restart-max-delay", "2")


def chaos_config(run_dir: Path, fleet: Path, free_port: Callable[[], int]) -> StackConfig:
    """A stack on free ports with keys on and the gateways' timeouts lowered to 10 s (so a freeze of
    ``Plan.freeze_s`` outlasts them, and SmolLM2's long answers outlast the first-byte one)."""
    env = {"LLMGW_AUTH": "true", "LLMGW_FIRST_BYTE_TIMEOUT_S": "10", "LLMGW_CHUNK_TIMEOUT_S": "10"}
    return StackConfig(
        fleet_file=fleet, run_dir=run_dir, redis_port=free_port(), keys_redis_port=free_port(),
        gateway_ports=(free_port(), free_port()), nginx_port=free_port(), prometheus_port=0,
        supervisor_metrics_port=free_port(), ready_deadline_s=900, drain_grace_s=10, gateway_env=env,
        workers_args=CHAOS_WORKERS_ARGS,
    )  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    d = Plan()
    p = argparse.ArgumentParser(prog="chaos", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--fleet", type=Path, default=REPO / "fleet.yaml")
    p.add_argument("--phase-s", type=float, default=d.phase_s, help="seconds of load per phase")
    p.add_argument("--concurrency", type=int, default=d.concurrency, help="clients sending at once")
    p.add_argument("--freeze-s", type=float, default=d.freeze_s, help="how long a replica stays frozen")
    p.add_argument("--phase", action="append", choices=list(PHASES), help="run only these phases")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--keep-logs", type=Path, default=None, help="copy the stack's logs here at the end")
    return p.parse_args(argv)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def own_fleet(fleet: Path, tmp: Path) -> Path:
    """The fleet moved to ports of its own (so that a running `make run` is left alone), with vLLM's
    request log on."""
    data = with_request_logs(yaml.safe_load(fleet.read_text()))
    data.setdefault("defaults", {})["base_port"] = 18300
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def main_async(args: argparse.Namespace) -> int:
    plan = Plan(phase_s=args.phase_s, concurrency=args.concurrency, freeze_s=args.freeze_s)
    with tempfile.TemporaryDirectory(prefix="llmgw-chaos-") as tmp:
        stack = Stack(chaos_config(Path(tmp) / "run", own_fleet(args.fleet, Path(tmp)), free_port))
        try:
            log.info("starting the stack (minutes: vLLM loads its models)")
            await stack.up()
            results = await run_chaos(stack, plan, args.phase)
        finally:
            await stack.down()
            if args.keep_logs is not None:
                shutil.copytree(stack.logs, args.keep_logs, dirs_exist_ok=True)
    if args.out is not None:
        summary = {"plan": asdict(plan), "phases": [r.summary() for r in results]}
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
    return 1 if any(r.failed for r in results) else 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
