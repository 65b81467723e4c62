"""`make chaos`: a fault matrix on the real embedded stack, under mixed load through nginx.

Each phase runs the same load (streamed and non-streamed chat, completions, embeddings, from
``--concurrency`` clients) while one fault strikes a quarter of the way in: a vLLM replica killed -9 (its
whole process group, as a container dies), a gateway killed -9 then started again, the state Redis killed
-9 then started again, the key store killed -9 then started again (keys must survive), a replica frozen
with SIGSTOP for longer than the gateways' timeouts. Between phases the stack gets back to full strength.

Every request ends as one of: **answered** (a complete answer: JSON with choices/data, or a stream that
ends with ``data: [DONE]``), **clear error** (an error in OpenAI's shape with its status, or a stream that
ends with an SSE error event and ``[DONE]``), **cut** (the HTTP exchange itself failed where the client
sees it: a connection reset, a chunked body that ends without its last chunk; only a process killed -9
while it was sending, a gateway, can leave this, because nginx cannot append an error to a body it has
started), or **lost** (silent or hung: a stream that ends cleanly without ``[DONE]``, a 200 without an
answer, a body that is not in the error shape, a client timeout). Lost must be 0; the exit status is 1
otherwise.

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
import os
import signal
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped]
import redis.asyncio as aioredis
import yaml

from contract.redis_keys import RedisKeys
from contract.registry import read_registry
from gateway.auth.keys import ApiKey, KeyStore, new_secret
from workers.stack.stack import REPO, Stack, StackConfig

log = logging.getLogger("llmgw.chaos")
ANSWERED, CLEAR, CUT, LOST = "answered", "clear error", "cut", "lost"


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


@dataclass
class Tally:
    """Outcomes of one phase, by kind of request, with the first few lost ones described."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # clear errors by status and code
    lost: list[str] = field(default_factory=list)

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


def is_error_shape(body: bytes) -> bool:
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(err, dict) and bool(err.get("message")) and "type" in err


def error_code(body: bytes) -> str:
    err = json.loads(body)["error"]
    return str(err.get("code") or err.get("type"))


def judge_whole(status: int, body: bytes) -> tuple[str, str]:
    if status >= 400:
        if is_error_shape(body):
            return CLEAR, f"{status} {error_code(body)}"
        return LOST, f"{status} not in the error shape: {body[:120]!r}"
    try:
        data = json.loads(body)
    except ValueError:
        return LOST, f"{status} with a body that is not JSON: {body[:120]!r}"
    if data.get("choices") or data.get("data"):
        return ANSWERED, ""
    return LOST, f"{status} without choices or data: {body[:120]!r}"


def judge_stream(events: list[bytes]) -> tuple[str, str]:
    done = bool(events) and events[-1] == b"[DONE]"
    errored = any(is_error_shape(e) for e in events if e != b"[DONE]")
    if done and errored:
        return CLEAR, "stream " + next(error_code(e) for e in events if e != b"[DONE]" and is_error_shape(e))
    if done:
        return ANSWERED, ""
    return LOST, f"stream cut after {len(events)} events without [DONE]"


async def send(client: httpx.AsyncClient, url: str, req: Request) -> tuple[str, str]:
    try:
        if not req.stream:
            r = await client.post(url + req.path, json=req.body)
            return judge_whole(r.status_code, r.content)
        async with client.stream("POST", url + req.path, json=req.body) as r:
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


async def load(
    url: str, reqs: list[Request], plan: Plan, until: float, tally: Tally, headers: dict[str, str]
) -> None:
    """``plan.concurrency`` clients, each sending the next kind of request until ``until``."""
    kinds = itertools.cycle(reqs)

    async def client_loop() -> None:
        timeout = httpx.Timeout(plan.client_timeout_s, connect=10.0)
        async with httpx.AsyncClient(timeout=timeout, headers=headers) as client:
            while time.monotonic() < until:
                req = next(kinds)
                outcome, detail = await send(client, url, req)
                tally.add(req.kind, outcome, detail)

    await asyncio.gather(*(client_loop() for _ in range(plan.concurrency)))


# ---- faults -------------------------------------------------------------------------------------

Fault = Callable[["Chaos"], Awaitable[str]]


def signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgid(pid), sig)


class Chaos:
    """The stack under test and what the faults need: replica processes, services, the plan."""

    def __init__(self, stack: Stack, plan: Plan) -> None:
        self.stack, self.plan = stack, plan

    async def replica_pid(self, model: str) -> tuple[str, int]:
        """(replica id, pid) of a ready replica of ``model`` the supervisor runs, found by its port."""
        redis = aioredis.Redis.from_url(self.stack.config.redis_url)
        try:
            records = [r for r in await read_registry(redis, RedisKeys()) if r.model == model and r.routable]
        finally:
            await redis.aclose()
        workers = self.stack.service("workers").pid
        assert workers is not None
        children = psutil.Process(workers).children(recursive=True)
        for rec in sorted(records, key=lambda r: r.id):
            port = rec.url.rsplit(":", 1)[-1]
            for p in children:
                with contextlib.suppress(psutil.Error):
                    argv = p.cmdline()
                    if "--port" in argv and argv[argv.index("--port") + 1] == port:
                        return rec.id, p.pid
        raise RuntimeError(f"no running replica of {model} found")

    @property
    def chat_model(self) -> str:
        """The generating model with the most replicas: a fault on one leaves another serving."""
        models = [m for m in self.stack.fleet.models if m.engine.runner != "pooling"]
        return max(models, key=lambda m: m.replicas).name

    async def kill_restart(self, name: str) -> str:
        self.stack.service(name).signal_group(signal.SIGKILL)
        await asyncio.sleep(self.plan.down_s)
        await self.stack.restart(name)
        return f"{name} killed -9, started again after {self.plan.down_s:g} s"


async def kill_replica(c: Chaos) -> str:
    rid, pid = await c.replica_pid(c.chat_model)
    signal_group(pid, signal.SIGKILL)
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


async def no_fault(c: Chaos) -> str:
    return "no fault"


PHASES: dict[str, Fault] = {
    "baseline": no_fault,
    "kill -9 vLLM replica": kill_replica,
    "kill -9 gateway": kill_gateway,
    "kill -9 Redis (state)": kill_redis,
    "kill -9 key store": kill_key_store,
    "freeze replica": freeze_replica,
}


# ---- the run ------------------------------------------------------------------------------------


@dataclass
class PhaseResult:
    name: str
    note: str
    tally: Tally


async def run_phase(
    c: Chaos, name: str, fault: Fault, reqs: list[Request], headers: dict[str, str]
) -> PhaseResult:
    plan, tally = c.plan, Tally()
    start = time.monotonic()
    loader = asyncio.create_task(
        load(c.stack.config.nginx_url, reqs, plan, start + plan.phase_s, tally, headers)
    )
    await asyncio.sleep(plan.phase_s * plan.fault_at)
    log.info("phase %r: fault", name)
    note = await fault(c)
    await loader
    await c.stack.wait_for_fleet()  # full strength again before the next phase
    return PhaseResult(name, note, tally)


def table(results: list[PhaseResult]) -> str:
    rows = [f"{'phase':<24} {'answered':>9} {'clear error':>12} {'cut':>4} {'lost':>5}  what happened"]
    for r in results:
        t = r.tally
        counts = f"{t.total(ANSWERED):>9} {t.total(CLEAR):>12} {t.total(CUT):>4} {t.total(LOST):>5}"
        rows.append(f"{r.name:<24} {counts}  {r.note}")
        if t.errors:
            rows.append(
                f"{'':<24} clear errors: " + ", ".join(f"{k} x{n}" for k, n in t.errors.most_common())
            )
        rows += [f"{'':<24} {line}" for line in t.lost]
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
    for name in phases or list(PHASES):
        if name == "kill -9 key store" and not headers:
            continue  # keys off: nothing reads the key store
        result = await run_phase(chaos, name, PHASES[name], reqs, headers)
        t = result.tally
        counts = ", ".join(f"{o} {t.total(o)}" for o in (ANSWERED, CLEAR, CUT, LOST))
        print(f"{name}: {counts}", flush=True)
        results.append(result)
    print(table(results), flush=True)
    return results


def chaos_config(run_dir: Path, fleet: Path, free_port: Callable[[], int]) -> StackConfig:
    """A stack on free ports with keys on and the gateways' timeouts lowered to 10 s (so a freeze of
    ``Plan.freeze_s`` outlasts them)."""
    env = {"LLMGW_AUTH": "true", "LLMGW_FIRST_BYTE_TIMEOUT_S": "10", "LLMGW_CHUNK_TIMEOUT_S": "10"}
    return StackConfig(
        fleet_file=fleet, run_dir=run_dir, redis_port=free_port(), keys_redis_port=free_port(),
        gateway_ports=(free_port(), free_port()), nginx_port=free_port(), prometheus_port=0,
        supervisor_metrics_port=free_port(), ready_deadline_s=900, drain_grace_s=10, gateway_env=env,
    )  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    d = Plan()
    p = argparse.ArgumentParser(prog="chaos", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--fleet", type=Path, default=REPO / "fleet.yaml")
    p.add_argument("--phase-s", type=float, default=d.phase_s, help="seconds of load per phase")
    p.add_argument("--concurrency", type=int, default=d.concurrency, help="clients sending at once")
    p.add_argument("--freeze-s", type=float, default=d.freeze_s, help="how long a replica stays frozen")
    p.add_argument("--phase", action="append", choices=list(PHASES), help="run only these phases")
    return p.parse_args(argv)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def own_fleet(fleet: Path, tmp: Path) -> Path:
    """The fleet moved to ports of its own, so that a running `make run` is left alone."""
    data = yaml.safe_load(fleet.read_text())
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
    return 1 if any(r.tally.total(LOST) for r in results) else 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
