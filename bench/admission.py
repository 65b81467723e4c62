"""Admission benchmark against the FAKE ENGINE (testing/fake_engine.py, not a model) with two gateway
replicas, each its own ``llmgw-gateway`` process, sharing one private redis-server.

1. overhead: the latency admission adds (p50/p99, sequential requests, below capacity) against the same
   path with admission off (LLMGW_ADMISSION=false);
2. capacity: N requests (default 10,000) offered to a model of capacity 8: the engine's peak in-flight
   (its /stats) must stay <= 8, every request answered (200 or a clear 429), none lost, none duplicated
   (request ids echoed by the gateway, and the engine's served count equal to the 200s);
3. fairness: two tenants (API keys) offering 10:1 load, both backlogged: each must get >= 45 % of service.

Usage: ``python -m bench.admission [--requests 10000] [--concurrency 64] [--fair-s 10]``. Exit status 1
when a check fails. Runs in about a minute on two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import redis.asyncio as aioredis
import yaml

from gateway.auth.keys import ApiKey, KeyStore, new_secret
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord, publish
from llmgw_tools.stack.redis import redis_server_argv
from testing.procs import spawn

MODEL = "bench-model"
FAIR_MODEL = "bench-fair"  # its own FAKE ENGINE, slow enough that capacity, not CPU, is the bottleneck
PREFIX = "bench"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
RAW_BODY = orjson.dumps(BODY)
RAW_FAIR_BODY = orjson.dumps({**BODY, "model": FAIR_MODEL})
PATH = "/v1/chat/completions"
GATEWAY_BIN = str(Path(sys.executable).parent / "llmgw-gateway")


class Conn:
    """A minimal keep-alive HTTP/1.1 client on one connection: httpx's pool, not the gateway, would be
    the bottleneck at dozens of concurrent requests on two cores."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(
        self, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {self.host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{extra}\r\n"
        )
        self.writer.write(head.encode() + body)
        lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        got = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
        data = await self.reader.readexactly(int(got.get("content-length", "0")))
        return status, got, data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Procs:
    tmp: Path
    running: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn(self, argv: list[str], name: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        p = spawn(argv, 0, self.tmp / f"{name}.log", env).popen
        self.running.append(p)
        return p

    def stop(self, p: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)
        self.running.remove(p)

    def stop_all(self) -> None:
        for p in list(self.running):
            self.stop(p)


async def wait_http(client: httpx.AsyncClient, url: str, deadline_s: float = 30) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with contextlib.suppress(httpx.HTTPError):
            if (await client.get(url)).status_code == 200:
                return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {deadline_s} s")


@dataclass
class Stack:
    procs: Procs
    client: httpx.AsyncClient
    redis_url: str
    engine_url: str
    fleet_file: Path

    @contextlib.asynccontextmanager
    async def gateways(self, name: str, **settings: str) -> AsyncIterator[list[str]]:
        """Two gateway processes with the given LLMGW_* settings."""
        env = {
            "LLMGW_FLEET_FILE": str(self.fleet_file),
            "LLMGW_REDIS_URL": self.redis_url,
            "LLMGW_REDIS_PREFIX": PREFIX,
            "LLMGW_LOG_LEVEL": "WARNING",
            "LLMGW_HEALTH_INTERVAL_S": "1",
            **{f"LLMGW_{k.upper()}": v for k, v in settings.items()},
        }
        ports = [free_port(), free_port()]
        gws = [
            self.procs.spawn(
                [GATEWAY_BIN, "--port", str(port), "--gateway-id", f"{name}-{i}"], f"gw-{name}-{i}", env
            )
            for i, port in enumerate(ports)
        ]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        try:
            for url in urls:
                await wait_http(self.client, f"{url}/ready")
            yield urls
        finally:
            for p in gws:
                self.procs.stop(p)

    async def engine_stats(self) -> dict[str, int]:
        out: dict[str, int] = (await self.client.get(f"{self.engine_url}/stats")).json()
        return out

    async def reset_engine(self) -> None:
        await self.client.get(f"{self.engine_url}/stats/reset")


def percentile(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=1000, method="inclusive")[int(q * 1000) - 1] if len(xs) > 1 else xs[0]


async def sequential(urls: list[str], n: int) -> list[float]:
    conns = [Conn(u) for u in urls]
    out = []
    for i in range(n):
        t = time.perf_counter()
        status, _, body = await conns[i % 2].post(PATH, RAW_BODY, {})
        out.append(time.perf_counter() - t)
        assert status == 200, body
    for c in conns:
        await c.close()
    return out


async def overhead(stack: Stack, n: int) -> dict[str, list[float]]:
    result = {}
    for name, on in (("admission off", "false"), ("admission on", "true")):
        async with stack.gateways(f"lat-{on}", admission=on) as urls:
            await sequential(urls, 100)  # warm-up
            result[name] = await sequential(urls, n)
    return result


@dataclass
class LoadResult:
    offered: int
    statuses: Counter[int]
    ids: Counter[str]
    engine_peak: int
    engine_served: int
    sampled_peak: int
    seconds: float

    @property
    def answered(self) -> int:
        return sum(self.statuses.values())

    @property
    def duplicated(self) -> int:
        return sum(c - 1 for c in self.ids.values() if c > 1)


async def sample_inflight(stack: Stack, stop: asyncio.Event) -> int:
    peak = 0
    while not stop.is_set():
        with contextlib.suppress(httpx.HTTPError):
            peak = max(peak, (await stack.engine_stats())["inflight"])
        await asyncio.sleep(0.02)
    return peak


async def offer(stack: Stack, urls: list[str], total: int, concurrency: int) -> LoadResult:
    await stack.reset_engine()
    statuses: Counter[int] = Counter()
    ids: Counter[str] = Counter()
    queue = iter(range(total))
    run = uuid.uuid4().hex[:6]

    async def worker(w: int) -> None:
        conn = Conn(urls[w % 2])
        for i in queue:
            try:
                status, headers, _ = await conn.post(PATH, RAW_BODY, {"x-request-id": f"{run}-{i}"})
            except (OSError, asyncio.IncompleteReadError):
                await conn.close()
                conn = Conn(urls[w % 2])
                continue  # counted as lost
            statuses[status] += 1
            ids[headers.get("x-request-id", "")] += 1
        await conn.close()

    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_inflight(stack, stop))
    t = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    seconds = time.perf_counter() - t
    stop.set()
    sampled = await sampler
    s = await stack.engine_stats()
    return LoadResult(total, statuses, ids, s["peak"], s["served"], sampled, seconds)


async def tenant_keys(redis_url: str) -> dict[str, str]:
    redis = aioredis.Redis.from_url(redis_url)
    store = KeyStore(redis, RedisKeys(PREFIX))
    out = {}
    for tenant in ("heavy", "light"):
        key_id, secret = new_secret()
        await store.create(ApiKey(key_id, tenant), secret)
        out[tenant] = secret
    await redis.aclose()
    return out


async def fairness(stack: Stack, seconds: float, heavy_clients: int, light_clients: int) -> dict[str, int]:
    secrets = await tenant_keys(stack.redis_url)
    served: Counter[str] = Counter()
    measuring = asyncio.Event()
    stop = asyncio.Event()
    async with stack.gateways("fair", auth="true") as urls:

        async def client(tenant: str, i: int) -> None:
            headers = {"authorization": f"Bearer {secrets[tenant]}"}
            conn = Conn(urls[i % 2])
            while not stop.is_set():
                status, _, _ = await conn.post(PATH, RAW_FAIR_BODY, headers)
                if status == 200 and measuring.is_set() and not stop.is_set():
                    served[tenant] += 1
            await conn.close()

        tasks = [asyncio.create_task(client("heavy", i)) for i in range(heavy_clients)]
        tasks += [asyncio.create_task(client("light", i)) for i in range(light_clients)]
        await asyncio.sleep(1.0)  # both tenants backlogged before measuring
        measuring.set()
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*tasks)
    return dict(served)


def row(cells: list[str], widths: tuple[int, ...] = (42, 54, 4)) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def checks(load: LoadResult, fair: dict[str, int], capacity: int) -> list[tuple[str, str, bool]]:
    total = sum(fair.values()) or 1
    heavy, light = (fair.get(t, 0) for t in ("heavy", "light"))
    return [
        ("engine peak in-flight <= capacity",
         f"{load.engine_peak} (sampled {load.sampled_peak}) <= {capacity}", load.engine_peak <= capacity),
        ("every request answered (200 or 429)", f"{load.answered}/{load.offered} {dict(load.statuses)}",
         load.answered == load.offered and set(load.statuses) <= {200, 429}),
        ("none lost", f"{load.offered - load.answered}", load.answered == load.offered),
        ("none duplicated", f"{load.duplicated} ids twice; engine served {load.engine_served}, "
         f"200s {load.statuses[200]}", load.duplicated == 0 and load.engine_served == load.statuses[200]),
        ("fair share, 10:1 offered, both backlogged", f"heavy {heavy / total:.1%} ({heavy})  light "
         f"{light / total:.1%} ({light})", min(heavy, light) / total >= 0.45),
    ]  # fmt: skip


def report(
    lat: dict[str, list[float]], load: LoadResult, off: LoadResult, fair: dict[str, int], capacity: int
) -> bool:
    ms = {k: (percentile(v, 0.5) * 1000, percentile(v, 0.99) * 1000) for k, v in lat.items()}
    on, no = ms["admission on"], ms["admission off"]
    results = checks(load, fair, capacity)
    lines = [
        "FAKE ENGINE admission benchmark: two llmgw-gateway processes, one redis-server",
        "",
        row(["latency, sequential, below capacity", "p50 ms / p99 ms", ""]),
        *(row([f"  {k}", f"{v[0]:.2f} / {v[1]:.2f}", ""]) for k, v in ms.items()),
        row(["  added by admission", f"{on[0] - no[0]:+.2f} / {on[1] - no[1]:+.2f}", ""]),
        "",
        row([f"load: {load.offered} requests, capacity {capacity}",
             f"{load.seconds:.1f} s, {load.offered / load.seconds:.0f} req/s", ""]),
        row([f"  contrast: {off.offered} with admission off", f"engine peak {off.engine_peak}", ""]),
        "",
        row(["check", "measured", "ok"]),
        *(row([name, value, "PASS" if good else "FAIL"]) for name, value, good in results),
    ]  # fmt: skip
    print("\n".join(lines))
    return all(good for *_, good in results)


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-") as tmp:
        yield Path(tmp)


async def wait_port(port: int, deadline_s: float = 10) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"port {port} not open")


async def register(redis_url: str, model: str, engine_url: str, capacity: int) -> None:
    rec = ReplicaRecord(id=f"{model}-0", model=model, url=engine_url, concurrency=capacity)
    redis = aioredis.Redis.from_url(redis_url)
    await publish(redis, RedisKeys(PREFIX), rec, 3600)
    await redis.aclose()


def fleet(capacity: int) -> str:
    def model(name: str) -> dict[str, object]:
        return {
            "name": name,
            "source": {"path": "/nonexistent"},
            "policy": "least_inflight",
            "concurrency": capacity,
            "max_queue": 1024,
            "max_queue_wait_s": 60,
        }

    return yaml.safe_dump({"models": [model(MODEL), model(FAIR_MODEL)]})


async def main_async(args: argparse.Namespace) -> bool:
    with workdir() as tmp:
        procs = Procs(tmp)
        try:
            redis_port, engine_port, fair_port = free_port(), free_port(), free_port()
            procs.spawn(
                redis_server_argv("redis-server", redis_port, tmp),
                "redis",
            )
            procs.spawn(
                [
                    sys.executable,
                    "-m",
                    "testing.fake_engine",
                    "--port",
                    str(engine_port),
                    "--model",
                    MODEL,
                    "--latency-ms",
                    str(args.latency_ms),
                    "--tokens",
                    "4",
                ],
                "engine",
            )
            procs.spawn(
                [
                    sys.executable,
                    "-m",
                    "testing.fake_engine",
                    "--port",
                    str(fair_port),
                    "--model",
                    FAIR_MODEL,
                    "--latency-ms",
                    str(args.fair_latency_ms),
                    "--tokens",
                    "4",
                ],
                "engine-fair",
            )
            await wait_port(redis_port)
            redis_url, engine_url = f"redis://127.0.0.1:{redis_port}/0", f"http://127.0.0.1:{engine_port}"
            fleet_file = tmp / "fleet.yaml"
            fleet_file.write_text(fleet(args.capacity))
            limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
            async with httpx.AsyncClient(timeout=120, limits=limits) as client:
                fair_url = f"http://127.0.0.1:{fair_port}"
                for url in (engine_url, fair_url):
                    await wait_http(client, f"{url}/health")
                await register(redis_url, MODEL, engine_url, args.capacity)
                await register(redis_url, FAIR_MODEL, fair_url, args.capacity)
                stack = Stack(procs, client, redis_url, engine_url, fleet_file)
                lat = await overhead(stack, args.latency_requests)
                async with stack.gateways("load", admission="true") as urls:
                    load = await offer(stack, urls, args.requests, args.concurrency)
                async with stack.gateways("off", admission="false") as urls:
                    off = await offer(stack, urls, args.requests // 5, args.concurrency)
                fair = await fairness(stack, args.fair_s, 10 * args.light_clients, args.light_clients)
            return report(lat, load, off, fair, args.capacity)
        finally:
            procs.stop_all()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=10_000, help="requests offered in the capacity run")
    p.add_argument("--concurrency", type=int, default=64, help="clients in the capacity run")
    p.add_argument("--capacity", type=int, default=8, help="the model's capacity (one replica)")
    p.add_argument("--latency-ms", type=float, default=5.0, help="the FAKE ENGINE's latency per request")
    p.add_argument("--latency-requests", type=int, default=1000, help="sequential requests per latency run")
    p.add_argument("--fair-s", type=float, default=10.0, help="seconds measured in the fairness run")
    p.add_argument("--light-clients", type=int, default=8, help="clients of the light tenant (heavy: 10x)")
    p.add_argument(
        "--fair-latency-ms",
        type=float,
        default=50.0,
        help="latency of the fairness run's FAKE ENGINE (capacity must be the bottleneck)",
    )
    args = p.parse_args(argv)
    return 0 if asyncio.run(main_async(args)) else 1


if __name__ == "__main__":
    sys.exit(main())
