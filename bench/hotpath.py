"""The hot-path benchmark (``make bench``): what the gateway costs per request.

The FAKE ENGINE (testing/fake_engine.py) stands in for vLLM.  The proxy under test is pinned to
core 0; the engine and this load generator share core 1.  For each target (direct to the engine,
nginx alone, the gateway with admission off and on, and, over two fake replicas with admission off,
``rr-2`` round robin against ``prefix-2`` the default policy with its shared prefix index in Redis; and
``gateway-no-migration``, the gateway with mid-stream migration off: what recording token ids costs;
``production``, the defaults users run: API keys on with a key that has rpm/tpm limits carried by every
request, Redis admission on, migration on, tracing off; ``production+tracing``, the same with tracing on,
its spans sent to a loopback OTLP receiver in this process),
and vLLM Router (the Rust router of the ``vllm-router`` package) as the peer: round robin over one engine,
round robin over two, its default cache_aware over two, and each shape (non-streamed 16 tokens, streamed
64 tokens) at concurrency 1, 32 and 256 it prints requests/s, p50/p99 latency and TTFT, the added p50 over
direct, the added p50 and p99 over nginx alone, the proxy's CPU milliseconds per request (from /proc of its
process tree), each the median of 3 runs, and that CPU as a ratio to vLLM Router's in the same run (rr-2
and prefix-2 against the router over the same two engines, round robin and cache_aware; every other target
against the router over one). With ``--profile DIR``, a py-spy profile of the production targets per shape
and concurrency, in a pass of its own after the measured runs (:mod:`bench.profile`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import redis.asyncio as aioredis

from bench import profile
from bench.loadgen import Result, Target, percentile, run
from bench.routing_workloads import chat_messages, document, question
from gateway.auth.keys import ApiKey, KeyStore, new_secret
from llmgw_contract.redis_keys import RedisKeys
from llmgw_tools.stack.redis import redis_server_argv
from llmgw_tools.stack.render import nginx_conf
from testing.otlp import trace_receiver
from testing.poll import wait_until
from testing.procs import REPO, Proc, free_port, http_ok, port_open, spawn

PROXY_CORE, LOAD_CORE = "0", "1"
SHAPES = {"non-stream": (False, 16), "stream": (True, 64), "followup-2k": (False, 16)}
"""Per shape: streamed, tokens out. ``followup-2k`` is a later turn of a conversation of ~2,000 SmolLM2
tokens (a document and four questions with their answers, then a fifth question): what the prefix
index's chain costs on a long prompt (:func:`followup_messages`)."""
TWO_REPLICAS = {"rr-2": "round_robin", "prefix-2": "prefix_affinity"}
# vLLM Router (the Rust router of the vllm-router package), the peer every CPU figure is divided by:
# round robin over one engine (beside nginx and the gateway), over two (beside rr-2), and its own
# default, cache_aware, over two (beside prefix-2).
ROUTER = "vllm-router"
ROUTERS = {
    ROUTER: ("round_robin", 1),
    "vllm-router-rr-2": ("round_robin", 2),
    "vllm-router-cache-2": ("cache_aware", 2),
}
PEER = {"rr-2": "vllm-router-rr-2", "prefix-2": "vllm-router-cache-2"}
PRODUCTION = {"production": False, "production+tracing": True}
"""The production defaults' targets, each with whether tracing is on."""
RPM, TPM = 10**9, 10**12
"""The benchmark key's limits: real limits, checked by the script on every request, never reached."""


@dataclass
class Row:
    target: str
    shape: str
    concurrency: int
    rps: float
    p50_ms: float
    p99_ms: float
    ttft_p50_ms: float
    cpu_ms_per_req: float
    errors: int
    added_p50_ms: float = 0.0
    cpu_vs_router: float = 0.0
    p50_vs_nginx_ms: float = 0.0
    p99_vs_nginx_ms: float = 0.0


def say(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and all its descendants."""
    proc = psutil.Process(pid)
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def followup_messages() -> list[dict[str, str]]:
    """A conversation's fifth turn, ~2,000 SmolLM2 tokens in all (the routing benchmark's word list)."""
    rng = random.Random("hotpath-followup")
    history = [(question(rng), document(rng, 150)) for _ in range(4)]
    return chat_messages(document(rng, 1150), history, question(rng))


def chat_body(stream: bool, tokens: int, shape: str = "non-stream") -> bytes:
    messages = (
        followup_messages()
        if shape == "followup-2k"
        else [{"role": "user", "content": "Hello there, benchmark."}]
    )
    body = {"model": "fake-model", "messages": messages, "max_tokens": tokens, "stream": stream}
    return json.dumps(body).encode()


def pinned(core: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", core, *argv]


@contextmanager
def started(proc: Proc) -> Iterator[Proc]:
    try:
        yield proc
    finally:
        proc.stop()


def start_engine(tmp: Path, delay_ms: float = 0.0) -> Proc:
    port = free_port()
    argv = [sys.executable, "-m", "testing.fake_engine", "--port", str(port), "--delay-ms", str(delay_ms)]
    argv = pinned(LOAD_CORE, argv)
    proc = spawn(argv, port, tmp / "engine.log")
    wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/health"), 15, "fake engine")
    return proc


def start_redis(tmp: Path) -> Proc:
    port = free_port()
    argv = pinned(LOAD_CORE, redis_server_argv("redis-server", port, tmp))
    proc = spawn(argv, port, tmp / "redis.log")
    wait_until(lambda: port_open(port), 10, "redis")
    return proc


def start_nginx(tmp: Path, engine: Proc) -> Proc:
    port, run_dir = free_port(), tmp / f"nginx-{time.monotonic_ns()}"
    run_dir.mkdir()
    conf = run_dir / "nginx.conf"
    template = REPO / "deploy/nginx/nginx.conf.template"
    conf.write_text(
        nginx_conf(
            template,
            f"127.0.0.1:{port}",
            [f"127.0.0.1:{engine.port}"],
            run_dir,
            rate="1000000r/s",
            burst=1000000,
        )
    )
    argv = pinned(PROXY_CORE, ["nginx", "-c", str(conf), "-p", str(run_dir), "-g", "daemon off;"])
    proc = spawn(argv, port, run_dir / "nginx.log")
    wait_until(lambda: port_open(port), 10, "nginx")
    return proc


def start_router(tmp: Path, engines: list[Proc], policy: str) -> Proc:
    """vLLM Router pinned to the proxy core, over the given fake engines, retries and its circuit
    breaker off (the fake engine never fails here), logs at warning."""
    port = free_port()
    argv = [
        str(Path(sys.executable).parent / "vllm-router"),
        *("--host", "127.0.0.1", "--port", str(port), "--policy", policy, "--log-level", "warning"),
        *("--worker-urls", *[e.url for e in engines]),
        *("--worker-startup-check-interval", "1", "--disable-retries", "--disable-circuit-breaker"),
    ]
    proc = spawn(pinned(PROXY_CORE, argv), port, tmp / f"vllm-router-{port}.log")
    wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/health"), 60, "vllm-router")
    return proc


def start_gateway(
    tmp: Path,
    engines: list[Proc],
    redis: Proc,
    admission: bool,
    policy: str = "round_robin",
    migration: bool = True,
    source: str = "",
    settings: dict[str, str] | None = None,
) -> Proc:
    """``source``: another checkout's gateway (its directory first on PYTHONPATH), e.g. main's, else this
    checkout's (a worktree sharing another checkout's virtualenv would run that one's editable install);
    ``settings``: more LLMGW_* variables. Its Redis prefix is ``bench<port>``."""
    port = free_port()
    fleet = tmp / f"fleet-bench-{port}.yaml"
    urls = ", ".join(f"{{url: '{e.url}', auth: none}}" for e in engines)
    fleet.write_text(  # migration named only when off (a checkout from before it knows no such field)
        "models:\n  - name: fake-model\n"
        f"    endpoints: [{urls}]\n    concurrency: 4096\n"
        f"    max_queue: 4096\n    policy: {policy}\n" + ("" if migration else "    migration: false\n")
    )
    env = {
        "PYTHONPATH": source or str(REPO),  # this checkout's code, not the venv's editable install's
        "LLMGW_ADMISSION": str(admission).lower(),
        "LLMGW_REDIS_URL": f"redis://127.0.0.1:{redis.port}/0",
        "LLMGW_REDIS_PREFIX": f"bench{port}",
        "LLMGW_LOG_LEVEL": "WARNING",
        **(settings or {}),
    }
    argv = pinned(
        PROXY_CORE,
        [str(Path(sys.executable).parent / "llmgw-gateway"), "--fleet", str(fleet), "--port", str(port)],
    )
    proc = spawn(argv, port, tmp / f"gateway-{port}.log", env)
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: proc.popen.poll() is not None or http_ok(f"{proc.url}/ready"), 60, "gateway")
    if proc.popen.poll() is not None or not http_ok(f"{proc.url}/ready"):  # its log goes with tmp: show it
        tail = "\n".join(proc.log.read_text(errors="replace").splitlines()[-20:])
        proc.stop()
        raise RuntimeError(f"gateway not ready within 60 s (exit {proc.popen.returncode}):\n{tail}")
    return proc


def measure(proxy_pid: int | None, target: Target, concurrency: int, requests: int) -> tuple[Result, float]:
    before = tree_cpu_s(proxy_pid) if proxy_pid else 0.0
    result = asyncio.run(run(target, concurrency, requests, max_seconds=60))
    after = tree_cpu_s(proxy_pid) if proxy_pid else 0.0
    served = result.ok + len(result.errors)
    return result, (after - before) * 1000 / max(1, served)


def requests_for(stream: bool, concurrency: int, scale: float) -> int:
    base = (
        {1: 600, 32: 3000, 256: 4000}[concurrency]
        if not stream
        else {1: 200, 32: 800, 256: 1500}[concurrency]
    )
    return max(concurrency, int(base * scale))


def row_of(name: str, shape: str, concurrency: int, runs: list[tuple[Result, float]]) -> Row:
    med = statistics.median
    return Row(
        name,
        shape,
        concurrency,
        rps=med(r.rps for r, _ in runs),
        p50_ms=med(percentile(r.latencies, 0.5) for r, _ in runs) * 1000,
        p99_ms=med(percentile(r.latencies, 0.99) for r, _ in runs) * 1000,
        ttft_p50_ms=med(percentile(r.ttfts, 0.5) for r, _ in runs) * 1000,
        cpu_ms_per_req=med(c for _, c in runs),
        errors=sum(len(r.errors) for r, _ in runs),
    )


def bench_target(
    name: str, proc: Proc | None, port: int, args: argparse.Namespace, api_key: str = ""
) -> list[Row]:
    rows = []
    for shape in args.shapes:
        stream, tokens = SHAPES[shape]
        body = chat_body(stream, tokens, shape)
        target = Target("127.0.0.1", port, "/v1/chat/completions", body, stream, tokens, api_key)
        for conc in args.concurrency:
            n = requests_for(stream, conc, args.scale)
            asyncio.run(run(target, min(conc, 32), min(n, 200), 30))  # warm-up
            runs = [measure(proc.popen.pid if proc else None, target, conc, n) for _ in range(args.repeats)]
            row = row_of(name, shape, conc, runs)
            rows.append(row)
            say(
                f"{name:<16} {shape:<10} c={conc:<4} {row.rps:8.0f} req/s  p50 {row.p50_ms:7.2f} ms  "
                f"cpu {row.cpu_ms_per_req:6.3f} ms/req  errors {row.errors}"
            )
            if row.errors:
                kinds = collections.Counter(e[:120] for r, _ in runs for e in r.errors)
                say(f"  errors: {dict(kinds.most_common(3))}")
            if proc and args.profile and name in args.profile_targets:
                profile_pass(name, proc.popen.pid, target, conc, shape, args)
    return rows


def profile_pass(
    name: str, pid: int, target: Target, conc: int, shape: str, args: argparse.Namespace
) -> None:
    """One more run of ``--profile-seconds`` after the measured ones, py-spy recording the proxy (pinned to
    the load core): its collapsed stacks gzip'ed and their top functions as text in ``--profile`` DIR. A
    separate pass, so that neither py-spy's CPU nor its pauses of the proxy (it stops the process for each
    sample) touch the measured rows."""
    args.profile.mkdir(parents=True, exist_ok=True)
    raw = args.profile / f"{name}-{shape}-c{conc}.collapsed"
    with profile.recording(pid, raw, args.profile_rate, LOAD_CORE):
        result = asyncio.run(run(target, conc, 10**9, args.profile_seconds))
    full = args.profile_rate * args.profile_seconds
    head = (
        f"{name} {shape} c={conc}: py-spy record --rate {args.profile_rate} --function --gil (blocking),"
        f" {result.rps:.0f} req/s over {args.profile_seconds:g} s in a pass of its own after the measured"
        f" runs, {len(result.errors)} errors. A sample is a moment a thread held the GIL (Python or the C"
        f" code it calls: uvloop, httptools, json), so samples / {full:.0f}"
        " is about the share of one core the proxy used; each share below is of the samples"
    )
    packed, brief = profile.keep(raw, args.profile_top, head)
    say(f"profile: {packed.name}, {brief.name}")


def add_overheads(rows: list[Row]) -> None:
    """Added p50 over direct, p50 and p99 over nginx alone's, and CPU per request as a ratio to vLLM
    Router's in the same run (rr-2 and prefix-2 to the router over the same two engines, every other
    target to the router over one)."""
    direct = {(r.shape, r.concurrency): r.p50_ms for r in rows if r.target == "direct"}
    nginx = {(r.shape, r.concurrency): r for r in rows if r.target == "nginx"}
    cpu = {(r.target, r.shape, r.concurrency): r.cpu_ms_per_req for r in rows}
    for r in rows:
        r.added_p50_ms = r.p50_ms - direct.get((r.shape, r.concurrency), r.p50_ms)
        if (base := nginx.get((r.shape, r.concurrency))) is not None:
            r.p50_vs_nginx_ms, r.p99_vs_nginx_ms = r.p50_ms - base.p50_ms, r.p99_ms - base.p99_ms
        peer = cpu.get((PEER.get(r.target, ROUTER), r.shape, r.concurrency), 0.0)
        r.cpu_vs_router = r.cpu_ms_per_req / peer if peer > 0 and r.target != "direct" else 0.0


def table(rows: list[Row]) -> str:
    head = (
        "| target | shape | conc | req/s | p50 ms | p99 ms | TTFT p50 ms | added p50 ms | p50 − nginx ms "
        "| p99 − nginx ms | proxy CPU ms/req | × vLLM Router | errors |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [
        f"| {r.target} | {r.shape} | {r.concurrency} | {r.rps:.0f} | {r.p50_ms:.2f} | {r.p99_ms:.2f} | "
        f"{r.ttft_p50_ms:.2f} | {r.added_p50_ms:+.2f} | {r.p50_vs_nginx_ms:+.2f} | "
        f"{r.p99_vs_nginx_ms:+.2f} | {r.cpu_ms_per_req:.3f} | "
        f"{f'{r.cpu_vs_router:.2f}' if r.cpu_vs_router else '—'} | {r.errors} |"
        for r in rows
    ]
    return "\n".join([head, *lines])


def ratio_table(rows: list[Row]) -> str:
    """The issue's table: one line per target, CPU ms per request with its ratio to vLLM Router's."""
    cells = [(shape, c) for shape in SHAPES for c in sorted({r.concurrency for r in rows})]
    head = "| proxy | " + " | ".join(f"{shape} c={c}" for shape, c in cells) + " |"
    lines = [head, "|---|" + "---|" * len(cells)]
    by = {(r.target, r.shape, r.concurrency): r for r in rows}
    for name in dict.fromkeys(r.target for r in rows if r.target != "direct"):
        found = [by.get((name, shape, c)) for shape, c in cells]
        text = [
            "—"
            if r is None
            else f"{r.cpu_ms_per_req:.3f} ({r.cpu_vs_router:.2f}×)"
            if r.cpu_vs_router
            else f"{r.cpu_ms_per_req:.3f}"
            for r in found
        ]
        lines.append(f"| {name} | " + " | ".join(text) + " |")
    return "\n".join(lines)


def latency_table(rows: list[Row]) -> str:
    """One line per target: the p50 / p99 latency it adds over nginx alone's in the same run, per shape."""
    cells = [(shape, c) for shape in SHAPES for c in sorted({r.concurrency for r in rows})]
    lines = [
        "| proxy | " + " | ".join(f"{shape} c={c}" for shape, c in cells) + " |",
        "|---|" + "---|" * len(cells),
    ]
    by = {(r.target, r.shape, r.concurrency): r for r in rows}
    for name in dict.fromkeys(r.target for r in rows if r.target not in ("direct", "nginx")):
        found = [by.get((name, shape, c)) for shape, c in cells]
        text = ["—" if r is None else f"{r.p50_vs_nginx_ms:+.2f} / {r.p99_vs_nginx_ms:+.2f}" for r in found]
        lines.append(f"| {name} | " + " | ".join(text) + " |")
    return "\n".join(lines)


def many_streams(tmp: Path, gateway: Proc, n: int) -> str:
    target = Target("127.0.0.1", gateway.port, "/v1/chat/completions", chat_body(True, 64), True, 64)
    result = asyncio.run(run(target, n, 2 * n, 120))
    return f"{n} concurrent streams through the gateway: {result.ok} ok, {len(result.errors)} errors " + (
        f"(first: {result.errors[0]})" if result.errors else ""
    )


def soak(gateway: Proc, seconds: float) -> str:
    target = Target("127.0.0.1", gateway.port, "/v1/chat/completions", chat_body(False, 16), False, 16)
    samples: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        asyncio.run(run(target, 256, 10**9, min(30.0, end - time.monotonic())))
        samples.append(psutil.Process(gateway.popen.pid).memory_info().rss / 2**20)
        say(f"soak: RSS {samples[-1]:.1f} MiB")
    first, last = samples[0], samples[-1]
    change = (last / first - 1) * 100
    return f"soak {seconds:.0f} s at concurrency 256: RSS {first:.1f} → {last:.1f} MiB ({change:+.1f} %)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32, 256])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    p.add_argument("--scale", type=float, default=1.0, help="multiply request counts")
    p.add_argument(
        "--targets",
        nargs="+",
        default=[
            "direct",
            "nginx",
            *ROUTERS,
            "gateway",
            "gateway-no-migration",
            "gateway+admission",
            *PRODUCTION,
            "rr-2",
            "prefix-2",
        ],
    )
    p.add_argument(
        "--engine-delay-ms", type=float, default=0.0, help="the FAKE ENGINE's gap between stream events"
    )
    p.add_argument("--streams", type=int, default=1000, help="concurrent streams check (0 to skip)")
    p.add_argument("--soak", type=float, default=0, help="seconds of soak at concurrency 256 (0 to skip)")
    p.add_argument("--json", type=Path, default=REPO / "bench/results/hotpath.json")
    p.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="py-spy profiles of the --profile-targets, one per shape and concurrency, in a pass of their own"
        " after the measured runs: collapsed stacks (.collapsed.gz) and their top functions (.top.txt)",
    )
    p.add_argument("--profile-targets", nargs="+", default=list(PRODUCTION))
    p.add_argument("--profile-seconds", type=float, default=5.0, help="length of each profiling pass")
    p.add_argument("--profile-rate", type=int, default=250, help="py-spy samples per second")
    p.add_argument("--profile-top", type=int, default=25, help="functions and files in each summary")
    p.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="another checkout (e.g. `git archive main`) whose gateway runs as target NAME/gateway,"
        " NAME/gateway-no-migration, NAME/production or NAME/production+tracing; name targets more than"
        " once to alternate",
    )
    args = p.parse_args(argv)
    args.sources = dict(b.split("=", 1) for b in args.baseline)
    if args.profile and not profile.available():
        raise SystemExit(f"--profile: no py-spy at {profile.PYSPY}")
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    os.sched_setaffinity(0, {int(LOAD_CORE)})
    rows: list[Row] = []
    notes: list[str] = [load_note("start")]
    say(notes[0])
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with started(start_engine(tmp, args.engine_delay_ms)) as engine, started(start_redis(tmp)) as redis:
            say(f"fake engine on :{engine.port} (core {LOAD_CORE}); proxies on core {PROXY_CORE}")
            for name in args.targets:
                notes.append(load_note(f"start of {name}"))
                say(notes[-1])
                rows += bench_one(name, tmp, engine, redis, args, notes)
    notes.append(load_note("end"))
    add_overheads(rows)
    print("\n" + table(rows))
    print("\nproxy CPU ms per request (× vLLM Router's in this run):\n" + ratio_table(rows))
    print("\nlatency added over nginx alone, p50 / p99 ms:\n" + latency_table(rows))
    for n in notes:
        print(n)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": [asdict(r) for r in rows], "notes": notes}, indent=1))
    return 0


def load_note(when: str) -> str:
    """The machine's load average (1, 5, 15 min) and core count at ``when``, for the log: this benchmark
    pins its processes to two cores, which other work on the machine may share."""
    one, five, fifteen = os.getloadavg()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    return f"load average at {when} ({stamp}): {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)"


def bench_one(
    name: str, tmp: Path, engine: Proc, redis: Proc, args: argparse.Namespace, notes: list[str]
) -> list[Row]:
    if name == "direct":
        return bench_target(name, None, engine.port, args)
    if name == "nginx":
        with started(start_nginx(tmp, engine)) as nginx:
            return bench_target(name, nginx, nginx.port, args)
    if name in ROUTERS:
        policy, count = ROUTERS[name]
        with contextlib.ExitStack() as extra:
            more = [extra.enter_context(started(start_engine(tmp))) for _ in range(count - 1)]
            with started(start_router(tmp, [engine, *more], policy)) as router:
                return bench_target(name, router, router.port, args)
    if name in TWO_REPLICAS:
        with started(start_engine(tmp)) as second:
            gateway = start_gateway(tmp, [engine, second], redis, admission=False, policy=TWO_REPLICAS[name])
            with started(gateway) as gw:
                return bench_target(name, gw, gw.port, args)
    source, _, plain = name.rpartition("/")
    if source and source not in args.sources:
        raise SystemExit(f"target {name}: no --baseline {source}=DIR")
    if plain in PRODUCTION:
        return bench_production(name, tmp, engine, redis, args, args.sources.get(source, ""))
    migration = (
        plain != "gateway-no-migration"
    )  # today's relay: no token ids recorded (the cost of migration)
    admission = plain.endswith("admission")
    gateway = start_gateway(
        tmp, [engine], redis, admission, migration=migration, source=args.sources.get(source, "")
    )
    with started(gateway) as gw:
        rows = bench_target(name, gw, gw.port, args)
        if name == "gateway" and args.streams:
            notes.append(many_streams(tmp, gw, args.streams))
            say(notes[-1])
        if name == "gateway" and args.soak:
            notes.append(soak(gw, args.soak))
            say(notes[-1])
        return rows


def bench_key(redis: Proc, prefix: str) -> str:
    """A key with rpm/tpm limits (:data:`RPM`, :data:`TPM`) created in the gateway's key store; its secret."""

    async def create() -> str:
        client = aioredis.Redis.from_url(f"redis://127.0.0.1:{redis.port}/0")
        try:
            key_id, secret = new_secret()
            await KeyStore(client, RedisKeys(prefix)).create(
                ApiKey(key_id, "bench", rpm=RPM, tpm=TPM), secret
            )
            return secret
        finally:
            await client.aclose()

    return asyncio.run(create())


def bench_production(
    name: str, tmp: Path, engine: Proc, redis: Proc, args: argparse.Namespace, source: str = ""
) -> list[Row]:
    """The production defaults (keys with limits, Redis admission, migration on) with tracing off, or on
    (``production+tracing``, spans to a loopback OTLP receiver); ``source``: another checkout's gateway
    (target ``NAME/production``)."""
    traced = PRODUCTION[name.rpartition("/")[2]]
    with contextlib.ExitStack() as stack:
        settings = {"LLMGW_AUTH": "true", "LLMGW_TRACING": str(traced).lower()}
        if traced:
            receiver = stack.enter_context(trace_receiver())
            settings["LLMGW_OTLP_TRACES_ENDPOINT"] = receiver.endpoint
        gateway = start_gateway(tmp, [engine], redis, True, source=source, settings=settings)
        gw = stack.enter_context(started(gateway))
        return bench_target(name, gw, gw.port, args, api_key=bench_key(redis, f"bench{gw.port}"))


if __name__ == "__main__":
    raise SystemExit(main())
