"""The Redis master killed -9 under load through nginx with two gateways (``make redis-failover``).

Per topology (Sentinel, Cluster; ``--topology`` picks), on loopback: the topology
(llmgw_tools/stack/redis_topology.py), FAKE ENGINE replicas (testing/fake_engine.py, not a model; two, each
logging every generation's request id like vLLM's ``--enable-log-requests``), a registration loop that
republishes them every second (as the sidecars do), two ``llmgw-gateway`` processes and real nginx in
front. ``--clients`` closed-loop clients send a steady mix of streamed and non-streamed chat requests
through nginx, each with its own ``X-Request-Id``; ``--warm-s`` in, the master that holds the model's
queue is killed -9; the load goes on for ``--after-s``. Then it reports, per topology:

- **answered** (200 with a complete answer), **clear errors** (429 or 503 with ``Retry-After``, by
  status), **lost** (anything else: another status, a 503 without ``Retry-After``, a cut or hung
  exchange, a client timeout), **ran twice** (a request id the engines received twice);
- **time to shared mode**: from the kill until both gateways' ``/ready`` say ``degraded: false`` and
  still do half a second later (the first time they said ``degraded: true`` is given too);
- **leased after**: slots still leased in the shared queue a few seconds after the load ended (must be 0).

Exit status 1 when anything was lost, ran twice or stayed leased.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import redis.asyncio as aioredis
import yaml

from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from llmgw_contract.registry import ReplicaRecord, publish
from llmgw_tools.stack.ports import free_port
from llmgw_tools.stack.redis_topology import Topology, start
from llmgw_tools.stack.render import nginx_conf
from llmgw_tools.stack.stack import REPO, tool
from testing.poll import wait_until
from testing.procs import Proc, http_ok, spawn

MODEL, REPLICAS, CAPACITY, PREFIX = "fo-model", 2, 4, "fo"
GATEWAY_BIN = str(Path(sys.executable).parent / "llmgw-gateway")
RECEIVED = re.compile(rb"Received request (fo\.\w+\.\d+)-[0-9a-f]{12}")


@dataclass
class Row:
    kind: str
    outcomes: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    clear: Counter[str] = field(default_factory=Counter)  # the clear errors' bodies (their start)
    ran_twice: int = 0
    first_degraded_s: float | None = None
    shared_back_s: float | None = None
    leased_after: int = -1

    def add(self, outcome: str, detail: str = "") -> None:
        self.outcomes[outcome] += 1
        if outcome == "lost" and len(self.lost) < 5:
            self.lost.append(detail)
        if outcome.startswith("clear"):
            self.clear[re.sub(r"\d+(\.\d+)?", "N", detail)] += 1

    @property
    def failed(self) -> bool:
        return bool(self.outcomes["lost"] or self.ran_twice or self.leased_after != 0)


def fleet_text() -> str:
    model = {"name": MODEL, "source": {"path": "/nonexistent"}, "concurrency": CAPACITY, "max_queue": 256}
    return yaml.safe_dump({"models": [{**model, "max_queue_wait_s": 5}]})


async def publish_all(redis: aioredis.Redis, engine_port: int) -> None:
    for k in range(REPLICAS):
        url_k = f"http://127.0.0.1:{engine_port + k}"
        rec = ReplicaRecord(id=f"r{k}", model=MODEL, url=url_k, concurrency=CAPACITY)
        with contextlib.suppress(Exception):  # the master is down: the next round publishes
            await publish(redis, RedisKeys(PREFIX), rec, 10)


async def republish(url: str, engine_port: int, stop: asyncio.Event) -> None:
    """The replicas' records, every second, as the sidecars do (a failover may lose the last writes)."""
    redis = connect(url, socket_timeout=1.0)
    try:
        while not stop.is_set():
            await publish_all(redis, engine_port)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    finally:
        await redis.aclose()


async def all_ready(http: httpx.AsyncClient, gateways: list[Proc], deadline_s: float = 30) -> None:
    """Both gateways see every replica ready (their first registry poll and health checks done)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        seen = []
        for gw in gateways:
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                detail = (await http.get(f"http://127.0.0.1:{gw.port}/ready")).json()
                seen.append(detail["models"][MODEL]["ready_replicas"])
        if seen == [REPLICAS] * len(gateways):
            return
        await asyncio.sleep(0.2)
    raise TimeoutError("the gateways did not see the replicas ready")


def body(n: int) -> bytes:
    stream = n % 2 == 0
    msgs = [{"role": "user", "content": f"failover request {n}"}]
    return orjson.dumps({"model": MODEL, "messages": msgs, "max_tokens": 8, "stream": stream})


def outcome(status: int, headers: httpx.Headers, text: str, stream: bool) -> tuple[str, str]:
    if status == 200:
        done = text.rstrip().endswith("data: [DONE]") if stream else '"choices"' in text
        return ("answered", "") if done else ("lost", f"200 without a complete answer: {text[-120:]!r}")
    if status in (429, 503) and "retry-after" in headers:
        return f"clear {status}", text[:140]
    return "lost", f"{status} {text[:160]!r}"


async def client(http: httpx.AsyncClient, url: str, kind: str, c: int, row: Row, stop: asyncio.Event) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        rid = f"fo.{kind}.{c * 1_000_000 + n}"
        raw = body(n)
        try:
            resp = await http.post(
                url, content=raw, headers={"x-request-id": rid, "content-type": "application/json"}
            )
            row.add(*outcome(resp.status_code, resp.headers, resp.text, n % 2 == 0))
        except httpx.HTTPError as exc:
            row.add("lost", f"{type(exc).__name__}: {exc}")


async def degraded(http: httpx.AsyncClient, gateways: list[Proc]) -> bool:
    for gw in gateways:
        try:
            if (await http.get(f"http://127.0.0.1:{gw.port}/ready", timeout=2.0)).json().get("degraded"):
                return True
        except (httpx.HTTPError, ValueError):
            return True
    return False


async def watch_shared(http: httpx.AsyncClient, gateways: list[Proc], killed: float, row: Row) -> None:
    """Times from the kill: first seen degraded, and back in shared mode (for half a second)."""
    while time.monotonic() - killed < 60:
        await asyncio.sleep(0.1)
        if await degraded(http, gateways):
            if row.first_degraded_s is None:
                row.first_degraded_s = time.monotonic() - killed
            continue
        if row.first_degraded_s is None:
            continue  # not noticed yet
        back = time.monotonic() - killed
        await asyncio.sleep(0.5)
        if not await degraded(http, gateways):
            row.shared_back_s = back
            return


def start_stack(tmp: Path, topo: Topology, engine_port: int) -> tuple[list[Proc], Proc]:
    fleet = tmp / "fleet.yaml"
    fleet.write_text(fleet_text())
    env = {"LLMGW_FLEET_FILE": str(fleet), "LLMGW_REDIS_URL": topo.url, "LLMGW_REDIS_PREFIX": PREFIX}
    env["LLMGW_LOG_LEVEL"] = "WARNING"
    gateways = []
    for g in range(2):
        port = free_port()
        argv = [GATEWAY_BIN, "--port", str(port), "--gateway-id", f"{topo.kind}-g{g}"]
        gateways.append(spawn(argv, port, tmp / f"gateway-{g}.log", env))
    for gw in gateways:
        wait_until(lambda p=gw.port: http_ok(f"http://127.0.0.1:{p}/ready"), 60, "gateway")  # type: ignore[misc]
    run, port = tmp / "nginx", free_port()
    run.mkdir()
    upstreams = [f"127.0.0.1:{gw.port}" for gw in gateways]
    conf = nginx_conf(
        REPO / "deploy/nginx/nginx.conf.template", f"127.0.0.1:{port}", upstreams, run, "10000r/s", 10000
    )
    (run / "nginx.conf").write_text(conf)
    argv = [tool("nginx"), "-c", str(run / "nginx.conf"), "-p", str(run), "-g", "daemon off;"]
    nginx = spawn(argv, port, tmp / "nginx.log")
    wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/health"), 20, "nginx")
    return gateways, nginx


async def leased(url: str) -> int:
    redis = connect(url, socket_timeout=2.0)
    try:
        return int(await redis.zcard(RedisKeys(PREFIX).leases(MODEL)))
    finally:
        await redis.aclose()


async def run_topology(kind: str, tmp: Path, clients: int, warm_s: float, after_s: float) -> Row:
    row, stop, stop_load = Row(kind), asyncio.Event(), asyncio.Event()
    topo = start(kind, tmp / "redis")
    engine_port = free_port()
    argv = [sys.executable, "-m", "testing.fake_engine", "--port", str(engine_port), "--ports", str(REPLICAS)]
    argv += ["--model", MODEL, "--tokens", "8", "--latency-ms", "20", "--enable-log-requests"]
    engine = spawn(argv, engine_port, tmp / "engine.log")
    procs: list[Proc] = [engine]
    publisher = asyncio.create_task(republish(topo.url, engine_port, stop))
    try:
        wait_until(lambda: http_ok(f"http://127.0.0.1:{engine_port + REPLICAS - 1}/health"), 20, "engine")
        gateways, nginx = start_stack(tmp, topo, engine_port)
        procs += [*gateways, nginx]
        url = f"http://127.0.0.1:{nginx.port}/v1/chat/completions"
        limits = httpx.Limits(max_connections=clients + 8)
        async with httpx.AsyncClient(timeout=30.0, limits=limits) as http:
            await all_ready(http, gateways)
            load = [asyncio.create_task(client(http, url, kind, c, row, stop_load)) for c in range(clients)]
            await asyncio.sleep(warm_s)
            victim = topo.master_port(RedisKeys(PREFIX).leases(MODEL))
            killed = time.monotonic()
            topo.node(victim).kill(signal.SIGKILL)
            print(f"{kind}: killed -9 the master on port {victim}", flush=True)
            watcher = asyncio.create_task(watch_shared(http, gateways, killed, row))
            await asyncio.sleep(after_s)
            stop_load.set()
            await asyncio.gather(*load)
            await asyncio.wait_for(watcher, 60)
        await asyncio.sleep(3.0)  # releases sent in the background have landed
        row.leased_after = await leased(topo.url)
    finally:
        stop.set()
        await publisher
        for proc in reversed(procs):
            proc.stop()
        topo.stop()
    runs = Counter(m.group(1) for m in RECEIVED.finditer((tmp / "engine.log").read_bytes()))
    row.ran_twice = sum(1 for n in runs.values() if n > 1)
    return row


def table(rows: list[Row]) -> str:
    lines = ["topology  answered  clear errors  lost  ran twice  degraded at  shared mode back  leased after"]
    for r in rows:
        clear = sum(n for k, n in r.outcomes.items() if k.startswith("clear"))
        by = ", ".join(f"{k.split()[1]} x{n}" for k, n in sorted(r.outcomes.items()) if k.startswith("clear"))
        first = f"{r.first_degraded_s:.1f} s" if r.first_degraded_s is not None else "never"
        back = f"{r.shared_back_s:.1f} s" if r.shared_back_s is not None else "-"
        lines.append(
            f"{r.kind:9s} {r.outcomes['answered']:8d} {clear:6d} ({by or '-'}) {r.outcomes['lost']:4d}"
            f" {r.ran_twice:9d} {first:>12s} {back:>17s} {r.leased_after:13d}"
        )
        lines += [f"          lost: {d}" for d in r.lost]
        lines += [f"          clear error x{n}: {d}" for d, n in r.clear.most_common(3)]
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> int:
    rows = []
    with tempfile.TemporaryDirectory(prefix="llmgw-failover-") as tmp:
        for kind in args.topology or ["sentinel", "cluster"]:
            row = await run_topology(kind, Path(tmp) / kind, args.clients, args.warm_s, args.after_s)
            print(f"{kind}: {dict(row.outcomes)}, ran twice {row.ran_twice}", flush=True)
            rows.append(row)
        if args.keep_logs is not None:
            shutil.copytree(tmp, args.keep_logs, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.sock"))
    print(table(rows))
    return 1 if any(r.failed for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topology", action="append", choices=["single", "sentinel", "cluster"])
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--warm-s", type=float, default=5.0, help="load before the kill")
    p.add_argument("--after-s", type=float, default=60.0, help="load after the kill")
    p.add_argument("--keep-logs", type=Path, default=None, help="copy the processes' logs here at the end")
    return asyncio.run(main_async(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
